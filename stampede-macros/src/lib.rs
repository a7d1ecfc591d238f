//! `#[cached]`: turns an existing `async fn` (or a plain `fn`, for threads) into a guarded
//! loader. See the `stampede` crate for the options; this crate is its code generator, in
//! three stages, each of which uses only what the stages before it make:
//!
//! - `args`: the attribute's grammar, into a typed model (`Args`): `grammar.rs`
//!   splits the options, `values.rs` reads each kind of value.
//! - `check`: what the attribute refuses, as a list of named checks over the options and
//!   the function, into the checked model (`Plan`); `key_usage.rs` finds which
//!   arguments a `key = ...` (or `tags = ...`) expression uses.
//! - `expand`: the generated code, from the plan alone.
//!
//! Every stage reports into one `Ctxt`, so all mistakes are shown together.
#![forbid(unsafe_code)]

mod args;
mod check;
mod ctxt;
mod expand;
mod plan;

use proc_macro::TokenStream;

/// Caches an `async fn`: one origin call per key at a time, fresh and stale windows,
/// early refresh, per-caller deadlines.
///
/// ```ignore
/// #[cached(fresh = "60s", stale = "30s", xfetch, key = (tenant, id), skip(db))]
/// async fn load_profile(tenant: TenantId, id: u64, db: &PgPool) -> Result<Profile, AppError> {
///     db.fetch_profile(&tenant, id).await
/// }
/// // Beside it: `LOAD_PROFILE.invalidate(&(tenant, id))`, `LOAD_PROFILE.stats()`.
/// ```
///
/// Options: `fresh` (required), `stale`, `stale_if_error`, `coalesce`, `xfetch`,
/// `jitter`, `key`, `key_type`, `skip`, `clone`, `timeout`, `load_timeout`, `admission`, `priority`, `admission_group`, `lease`, `name`,
/// `version`, `capacity`, `local`, `cache_none`, `cache_errors`, `trait_impl`,
/// `map_error`, `source_version`, `tags`, `returns`, `mode`, `batch` (the list the
/// attribute names when it meets an unknown one); `docs/attribute.md` has the table with
/// defaults.
/// Every argument, `self` included, must be in the key or in `skip(...)`.
///
/// A caller that needs both a function for one id and one for a page of ids writes the
/// batch function once, with `single = …`, rather than two cached functions:
///
/// ```ignore
/// #[cached(fresh = "60s", batch(ids, single = price), clone(db))]
/// async fn prices(ids: Vec<u64>, db: &PgPool) -> Result<HashMap<u64, Price>, AppError> {
///     db.prices(&ids).await
/// }
/// // Beside it: `async fn price(id: u64, db: &PgPool) -> Result<Option<Price>, AppError>`.
/// ```
///
/// `price(id)` and `prices(ids)` then share one cache: an entry per id, loaded by either,
/// served to both, and retired by one invalidation (`PRICES.invalidate(&id)`). Two cached
/// functions would keep each price twice, and every write would have to invalidate both.
#[proc_macro_attribute]
pub fn cached(attr: TokenStream, item: TokenStream) -> TokenStream {
    let original = proc_macro2::TokenStream::from(item.clone());
    let func: syn::ItemFn = match syn::parse(item) {
        Ok(func) => func,
        Err(_) => {
            let error = match syn::parse::<syn::TraitItemFn>(original.clone().into()) {
                // A declaration without a body, in a trait.
                Ok(declared) => syn::Error::new_spanned(
                    declared.sig.fn_token,
                    "#[cached] cannot go on a trait's method declaration: each implementation is a function of its own, with its own cache; put `#[cached(..., trait_impl)]` on the method in each `impl Trait for T`",
                ),
                Err(_) => syn::Error::new(
                    proc_macro2::Span::call_site(),
                    "#[cached] goes on an `async fn` (a free function, an associated function or a method)",
                ),
            };
            return with_original(error, original);
        }
    };
    let mut cx = ctxt::Ctxt::new();
    let args = args::Args::parse(attr.into(), &mut cx);
    let plan = check::check(args, &func, &mut cx);
    match (cx.finish(), plan) {
        (Ok(()), Some(plan)) => expand::expand(plan, func).into(),
        (Err(error), _) => with_original(error, original),
        (Ok(()), None) => with_original(
            syn::Error::new(
                proc_macro2::Span::call_site(),
                "#[cached] could not read this function",
            ),
            original,
        ),
    }
}

/// The errors, plus the function as written: one mistake must not turn into twenty
/// "cannot find function" errors at its callers, and editors keep working.
fn with_original(error: syn::Error, original: proc_macro2::TokenStream) -> TokenStream {
    let mut out = error.to_compile_error();
    out.extend(original);
    out.into()
}
