//! What a cached function's key, value and error must be, as traits with messages that
//! name the type at fault instead of pointing into generated code.
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::hash::Hash;

/// A type that can be a cache key: `Hash + Eq + Clone + Send + Sync + 'static`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a cache key",
    label = "this key is a `{Self}`",
    note = "a cache key must be `Hash + Eq + Clone + Send + Sync + 'static`; derive `Hash, PartialEq, Eq, Clone` on it, or key on fields that are"
)]
pub trait CacheKey: Hash + Eq + Clone + Send + Sync + 'static {}
impl<T: Hash + Eq + Clone + Send + Sync + 'static> CacheKey for T {}

/// A value that may live in memory only (`local`): `Clone + Send + Sync + 'static`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a cached value",
    label = "this function returns a `{Self}`",
    note = "a cached value must be `Clone + Send + Sync + 'static`; wrap it in `Arc` if cloning it is expensive or impossible"
)]
pub trait LocalValue: Clone + Send + Sync + 'static {}
impl<T: Clone + Send + Sync + 'static> LocalValue for T {}

/// A value that a shared store could hold: a [`LocalValue`] that serde can write and read.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a cached value without `local`",
    label = "this function returns a `{Self}`",
    note = "values must be `Clone + Send + Sync + 'static + Serialize + DeserializeOwned` so a runtime config can move them to a shared store; derive `Serialize, Deserialize`, or add `local` to keep them in memory only"
)]
pub trait CacheValue: LocalValue + Serialize + DeserializeOwned {}
impl<T: LocalValue + Serialize + DeserializeOwned> CacheValue for T {}

/// The error type of a [`Cache`](crate::Cache): every caller of a failed load gets a
/// clone. (`#[cached]` functions need no `Clone`: their caches carry the origin's error
/// behind an `Arc`.)
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the error type of a `Cache`",
    label = "this cache fails with `{Self}`",
    note = "every caller of a failed load gets a clone of its error, so a `Cache`'s error type must be `Clone + Send + Sync + 'static`; for an error that is not `Clone`, use `Arc<E>` and `CacheBuilder::new(policy, map_error)`, or `#[cached]`, which shares it for you"
)]
pub trait CacheError: Clone + Send + Sync + 'static {}
impl<T: Clone + Send + Sync + 'static> CacheError for T {}

/// The type of a source version: what [`CacheBuilder::source_version`]'s function returns
/// and what [`Cache::invalidate_at`] takes. A `u64`, or an `i64` (a Postgres `BIGINT`
/// column, say); `u32` and `i32` too, so an `INTEGER` column and a literal
/// (`invalidate_at(&id, 42)`) need no conversion. The shared store orders versions as
/// unsigned numbers, so a negative one is no version: a value read at one is stored
/// without a version, and an invalidation at one applies as [`Cache::invalidate`] does;
/// each is logged at warn level, naming the cache.
///
/// [`CacheBuilder::source_version`]: crate::CacheBuilder::source_version
/// [`Cache::invalidate_at`]: crate::Cache::invalidate_at
/// [`Cache::invalidate`]: crate::Cache::invalidate
#[diagnostic::on_unimplemented(
    message = "a source version is a `u64` or an `i64` (or a `u32` or an `i32`), not `{Self}`",
    label = "this source version is a `{Self}`",
    note = "return the version column as it is (`u64`, or `i64` for a BIGINT); a version that is not an integer cannot be ordered"
)]
pub trait SourceVersion: sealed::Ordered + Copy + Send + Sync + 'static {}

mod sealed {
    /// A version as the shared store orders it: `Err` holds a negative one, which it cannot.
    pub trait Ordered {
        fn ordered(self) -> Result<u64, i64>;
    }
}

macro_rules! source_versions {
    ($($unsigned:ty),* ; $($signed:ty),*) => {
        $(
            // Not listed under an error: the message names the four.
            #[diagnostic::do_not_recommend]
            impl SourceVersion for $unsigned {}
            impl sealed::Ordered for $unsigned {
                fn ordered(self) -> Result<u64, i64> {
                    Ok(u64::from(self))
                }
            }
        )*
        $(
            #[diagnostic::do_not_recommend]
            impl SourceVersion for $signed {}
            impl sealed::Ordered for $signed {
                fn ordered(self) -> Result<u64, i64> {
                    u64::try_from(self).map_err(|_| i64::from(self))
                }
            }
        )*
    };
}

source_versions!(u64, u32; i64, i32);
