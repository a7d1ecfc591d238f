//! What makes two cached functions two caches: each expansion of the attribute is its
//! own cache, and so is each instantiation of a generic one; the fallible reading of a
//! return type is the compiler's, so an alias never caches its errors.
use stampede::cached;
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug, Clone, PartialEq)]
pub enum DbError {
    Down,
    Cache(stampede::Error),
}

impl From<stampede::Error> for DbError {
    fn from(error: stampede::Error) -> Self {
        DbError::Cache(error)
    }
}

pub struct Users;
pub struct Orders;

// One macro writes two methods named `lookup` at one source position.
macro_rules! lookups {
    ($($table:ident => $base:expr, $value:ty;)*) => {$(
        impl $table {
            #[cached(fresh = "60s")]
            pub async fn lookup(id: u64) -> $value {
                <$value>::from($base + id as u32)
            }
        }
    )*};
}

lookups! {
    Users => 1_000, u32;
    Orders => 2_000, u64;
}

#[tokio::test]
async fn two_functions_written_by_one_macro_are_two_caches() {
    assert_eq!(Users::lookup(1).await, 1_001);
    assert_eq!(Orders::lookup(1).await, 2_001, "not the value Users cached");
    // Each handle reaches its own function's cache, whatever the value types.
    assert_eq!(Users::LOOKUP.stats().origin_calls, 1);
    assert_eq!(Orders::LOOKUP.stats().origin_calls, 1);
    Orders::LOOKUP.invalidate(&1).await.unwrap();
    assert_eq!(Orders::lookup(1).await, 2_001);
    assert_eq!(Orders::LOOKUP.stats().origin_calls, 2);
    assert_eq!(Users::lookup(1).await, 1_001);
    assert_eq!(
        Users::LOOKUP.stats().origin_calls,
        1,
        "Users was not invalidated"
    );
}

pub trait Table {
    const BASE: u64;
}
pub struct A;
pub struct B;
impl Table for A {
    const BASE: u64 = 100;
}
impl Table for B {
    const BASE: u64 = 200;
}

pub struct Repo<T>(std::marker::PhantomData<T>);

impl<T: Table> Repo<T> {
    #[cached(fresh = "60s")]
    pub async fn get(id: u64) -> u64 {
        T::BASE + id
    }
}

#[tokio::test]
async fn each_instantiation_of_a_generic_impl_has_its_own_cache() {
    assert_eq!(Repo::<A>::get(1).await, 101);
    assert_eq!(Repo::<B>::get(1).await, 201, "not A's value");
    assert_eq!(Repo::<A>::get(1).await, 101);
    assert_eq!(Repo::<B>::get(1).await, 201);
    assert_eq!(Repo::<A>::GET.stats().origin_calls, 1);
    assert_eq!(Repo::<B>::GET.stats().origin_calls, 1);
    Repo::<B>::GET.invalidate(&1).await.unwrap();
    assert_eq!(Repo::<B>::get(1).await, 201);
    assert_eq!(Repo::<B>::GET.stats().origin_calls, 2);
    assert_eq!(Repo::<A>::GET.stats().fresh_hits, 1, "A untouched");
}

static GENERIC_CALLS: AtomicUsize = AtomicUsize::new(0);

#[cached(fresh = "60s")]
async fn get_t<T: Table>(id: u64) -> u64 {
    GENERIC_CALLS.fetch_add(1, Ordering::SeqCst);
    T::BASE + id
}

#[tokio::test]
async fn each_instantiation_of_a_generic_function_has_its_own_cache() {
    assert_eq!(get_t::<A>(1).await, 101);
    assert_eq!(get_t::<B>(1).await, 201, "not A's value");
    assert_eq!(get_t::<A>(1).await, 101);
    assert_eq!(get_t::<B>(1).await, 201);
    assert_eq!(
        GENERIC_CALLS.load(Ordering::SeqCst),
        2,
        "one load per instantiation"
    );
}

/// An alias the macro cannot see through, declared fallible.
type Fallible<T> = Result<T, DbError>;

static ALIAS_CALLS: AtomicUsize = AtomicUsize::new(0);

#[cached(fresh = "60s", returns = result)]
async fn through_an_alias(id: u64) -> Fallible<u64> {
    match ALIAS_CALLS.fetch_add(1, Ordering::SeqCst) {
        0 => Err(DbError::Down),
        _ => Ok(id),
    }
}

#[tokio::test]
async fn an_error_returned_through_an_alias_is_not_cached() {
    assert_eq!(through_an_alias(5).await, Err(DbError::Down));
    assert_eq!(through_an_alias(5).await, Ok(5), "the error was not cached");
    assert_eq!(ALIAS_CALLS.load(Ordering::SeqCst), 2);
}

/// A plain value whose type's name ends in `Result` is cached as is.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchResult(u64);

static SEARCH_CALLS: AtomicUsize = AtomicUsize::new(0);

#[cached(fresh = "60s", local)]
async fn search(id: u64) -> SearchResult {
    SEARCH_CALLS.fetch_add(1, Ordering::SeqCst);
    SearchResult(id)
}

#[tokio::test]
async fn a_plain_type_named_like_a_result_is_a_plain_value() {
    assert_eq!(search(3).await, SearchResult(3));
    assert_eq!(search(3).await, SearchResult(3));
    assert_eq!(SEARCH_CALLS.load(Ordering::SeqCst), 1);
}

mod first {
    #[stampede::cached(fresh = "60s", name = "shared-name")]
    pub async fn value(id: u64) -> Result<u64, super::DbError> {
        Ok(id)
    }
}

mod second {
    #[stampede::cached(fresh = "60s", name = "shared-name")]
    pub async fn value(id: u64) -> Result<u64, super::DbError> {
        Ok(id * 10)
    }
}

#[tokio::test]
async fn two_caches_claiming_one_name_fail_the_second_ones_loads() {
    assert_eq!(first::value(1).await, Ok(1));
    match second::value(1).await {
        Err(DbError::Cache(stampede::Error::DuplicateName { cache, .. })) => {
            assert_eq!(&*cache, "shared-name")
        }
        other => panic!("expected a duplicate-name error, got {other:?}"),
    }
    assert_eq!(
        first::value(1).await,
        Ok(1),
        "the first claimant keeps working"
    );
    assert_eq!(second::VALUE.stats().origin_calls, 0);
}

static RAW_CALLS: AtomicUsize = AtomicUsize::new(0);

#[cached(fresh = "60s")]
async fn r#type(id: u64) -> u64 {
    RAW_CALLS.fetch_add(1, Ordering::SeqCst);
    id
}

#[tokio::test]
async fn a_raw_identifier_function_and_its_handle_share_one_cache() {
    assert_eq!(r#type(4).await, 4);
    assert_eq!(r#type(4).await, 4);
    assert_eq!(
        TYPE.stats().origin_calls,
        1,
        "the handle sees the body's loads"
    );
    assert_eq!(TYPE.stats().fresh_hits, 1);
    TYPE.invalidate(&4).await.unwrap();
    assert_eq!(r#type(4).await, 4);
    assert_eq!(
        RAW_CALLS.load(Ordering::SeqCst),
        2,
        "the invalidation reached the body's cache"
    );
}

/// Generic over a function type: two closures of one function print the same type name,
/// `Sized<identity::…::{{closure}}>`, while being two types of different sizes.
pub struct Sized<F> {
    _f: F,
}

impl<F: Fn() -> u64 + Send + Sync> Sized<F> {
    #[cached(fresh = "60s", skip(self))]
    async fn size_plus(&self, id: u64) -> u64 {
        std::mem::size_of::<F>() as u64 + id
    }
}

#[tokio::test]
async fn instantiations_whose_type_names_print_alike_never_share_a_cache() {
    let captured = 8u64;
    let zero_sized = Sized { _f: || 0u64 };
    let capturing = Sized {
        _f: move || captured,
    };
    assert_eq!(zero_sized.size_plus(1).await, 1);
    assert_eq!(zero_sized.size_plus(1).await, 1);
    assert_eq!(
        capturing.size_plus(1).await,
        9,
        "not the other instantiation's value"
    );
    assert_eq!(capturing.size_plus(1).await, 9);
}
