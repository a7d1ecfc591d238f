//! Every option of the attribute, on functions that return `Result`.
use crate::common::AppError;
use serde::{Deserialize, Serialize};
use stampede::cached;

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
struct TenantId(u32);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Profile {
    id: u64,
}

struct Db;

#[cached(
    fresh = "1m30s",
    stale = "30s",
    stale_if_error = "5m",
    coalesce,
    xfetch(beta = 1.5),
    jitter = 0.15,
    key = (tenant, user_id),
    skip(db),
    timeout = "2s",
    admission = "db",
    priority = high,
    admission_group = tenant,
    lease = "5s",
    name = "every-option-profile",
    version = 1,
    capacity = 10_000,
    tags = [format!("tenant:{}", tenant.0), "every-option".to_owned()],
)]
async fn load_profile(tenant: TenantId, user_id: u64, db: &Db) -> Result<Profile, AppError> {
    let _ = (&tenant, db);
    Ok(Profile { id: user_id })
}

#[cached(fresh = "250ms", coalesce = false, xfetch)]
async fn uncoalesced(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[derive(Debug, Clone)]
struct Opaque;

fn opaque(_: stampede::Error) -> Opaque {
    Opaque
}

#[cached(fresh = "1h", timeout = "100ms", map_error = opaque)]
async fn mapped(id: u64) -> Result<u64, Opaque> {
    Ok(id)
}

#[derive(Clone)]
struct NotSerde(u64);

#[cached(fresh = "1d", local)]
async fn local_only(id: u64) -> Result<NotSerde, AppError> {
    Ok(NotSerde(id))
}

fn profile_version(profile: &Profile) -> u64 {
    profile.id
}

#[cached(fresh = "1m", source_version = profile_version)]
async fn versioned(id: u64) -> Result<Profile, AppError> {
    Ok(Profile { id })
}

#[cached(fresh = "1m", local, source_version = |value: &NotSerde| value.0)]
async fn versioned_locally(id: u64) -> Result<NotSerde, AppError> {
    Ok(NotSerde(id))
}

type AppResult<T> = Result<T, AppError>;

#[cached(fresh = "10s", returns = result)]
async fn through_an_alias(id: u64) -> AppResult<u64> {
    Ok(id)
}

#[tokio::test(flavor = "current_thread")]
async fn every_option_compiles_and_runs() {
    let profile = load_profile(TenantId(1), 2, &Db).await.unwrap();
    assert_eq!(profile, Profile { id: 2 });
    assert_eq!(uncoalesced(3).await.unwrap(), 3);
    assert_eq!(mapped(4).await.unwrap(), 4);
    assert_eq!(local_only(5).await.unwrap().0, 5);
    assert_eq!(through_an_alias(6).await.unwrap(), 6);
    assert_eq!(versioned(7).await.unwrap(), Profile { id: 7 });
    assert_eq!(versioned_locally(8).await.unwrap().0, 8);
    VERSIONED.invalidate_at(&7, 7).await.unwrap();
    VERSIONED_LOCALLY.invalidate_at(&8, 9).await.unwrap();
    LOAD_PROFILE.invalidate(&(TenantId(1), 2)).await.unwrap();
    LOAD_PROFILE.invalidate_tag("tenant:1").await.unwrap();
    stampede::invalidate_tag("every-option").await.unwrap();
    LOAD_PROFILE.invalidate_all().await.unwrap();
    assert_eq!(LOAD_PROFILE.stats().origin_calls, 1);
    assert_eq!(
        LOAD_PROFILE.cache().policy().priority(),
        stampede::Priority::High
    );
    // The group is the tenant, hashed as the builder's `admission_group` hashes it.
    let group = LOAD_PROFILE.cache().admission_group(&(TenantId(1), 2));
    assert_eq!(
        group,
        LOAD_PROFILE.cache().admission_group(&(TenantId(1), 3))
    );
    assert_ne!(
        group,
        LOAD_PROFILE.cache().admission_group(&(TenantId(2), 2))
    );
}
