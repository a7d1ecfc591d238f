//! Forms of the attribute that must compile, and run as documented: every option, every
//! placement, arguments used in key expressions, composition with `#[instrument]`.
mod every_option;
mod key_accounting_and_modes;
mod placements;
mod with_instrument;
