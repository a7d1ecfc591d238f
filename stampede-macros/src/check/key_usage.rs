//! Which variables a `key = ...` expression uses, so the key check can tell an argument
//! left out of the key from one that is in it (and which a `tags = ...` expression uses,
//! so the tags check can tell an argument the key holds from one it does not). Names the
//! expression binds itself (closure parameters, `let`, `for`, `match` and `if let`
//! patterns) shadow the arguments; nested items see none of them.
use proc_macro2::Span;
use std::collections::{BTreeMap, BTreeSet};
use syn::punctuated::Punctuated;
use syn::visit::Visit;
use syn::{Expr, Pat, PatIdent};

/// The arguments (and `self`) an expression uses as variables: a single-segment path
/// (`id`, not the field in `user.id` nor `Foo::id`) that no closure parameter, `let` or
/// pattern of the expression shadows. Inside macro calls, whose tokens only the macro
/// understands, the arguments are read as expressions when they parse as such (so
/// `format!("{tenant}:{}", id)` uses `tenant` through its format string and `id`, while
/// in `format!("{r}", r = "eu")` only `"eu"` is used), and otherwise any identifier that
/// is not a field or path segment counts. Macros that only see their tokens as text
/// (`stringify!`, `concat!`) use nothing.
pub(super) fn variables_used(expr: &Expr) -> BTreeSet<String> {
    variables_used_at(expr).into_keys().collect()
}

/// [`variables_used`], each with the span of its first use (in a format string, the
/// string's), for an error under it.
pub(super) fn variables_used_at(expr: &Expr) -> BTreeMap<String, Span> {
    let mut uses = Uses::default();
    uses.visit_expr(expr);
    uses.found
}

#[derive(Default)]
struct Uses {
    /// Names bound inside the expression, innermost scope last.
    scopes: Vec<BTreeSet<String>>,
    /// Each variable used, with the span of its first use.
    found: BTreeMap<String, Span>,
}

impl Uses {
    fn uses(&mut self, name: String, span: Span) {
        if !self.scopes.iter().any(|scope| scope.contains(&name)) {
            self.found.entry(name).or_insert(span);
        }
    }

    fn scoped(&mut self, pats: &[&Pat], visit: impl FnOnce(&mut Self)) {
        let mut bound = BTreeSet::new();
        for pat in pats {
            bindings(pat, &mut bound);
        }
        self.scopes.push(bound);
        visit(self);
        self.scopes.pop();
    }

    /// A condition whose `let`s (alone or chained with `&&`) bind names for `then` only.
    fn conditional(&mut self, cond: &Expr, then: impl FnOnce(&mut Self)) {
        self.scopes.push(BTreeSet::new());
        self.chain(cond);
        then(self);
        self.scopes.pop();
    }

    /// Each `let` of a chain binds from the next link on.
    fn chain(&mut self, cond: &Expr) {
        match cond {
            Expr::Binary(and) if matches!(and.op, syn::BinOp::And(_)) => {
                self.chain(&and.left);
                self.chain(&and.right);
            }
            Expr::Let(link) => {
                self.visit_expr(&link.expr);
                if let Some(scope) = self.scopes.last_mut() {
                    bindings(&link.pat, scope);
                }
            }
            other => self.visit_expr(other),
        }
    }

    /// A format macro's arguments: its format string's captures, except the names its
    /// `name = value` arguments supply, and the values, never the names on the left.
    fn format_args(&mut self, args: &Punctuated<Expr, syn::Token![,]>) {
        let mut supplied = BTreeSet::new();
        let mut text = None;
        for arg in args {
            match arg {
                Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(literal),
                    ..
                }) if text.is_none() => text = Some((literal.value(), literal.span())),
                Expr::Assign(named) => {
                    if let Expr::Path(name) = &*named.left
                        && let Some(name) = name.path.get_ident()
                    {
                        supplied.insert(name.to_string());
                    }
                    self.visit_expr(&named.right);
                }
                other => self.visit_expr(other),
            }
        }
        if let Some((text, span)) = text {
            self.scopes.push(supplied);
            self.captures(&text, span);
            self.scopes.pop();
        }
    }

    /// `{name}` and `{name:…}` in a format string; `{{` is an escaped brace.
    fn captures(&mut self, text: &str, span: Span) {
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            rest = &rest[open + 1..];
            if let Some(escaped) = rest.strip_prefix('{') {
                rest = escaped;
                continue;
            }
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let name = &rest[..end];
            if name.starts_with(|c: char| c.is_alphabetic() || c == '_') {
                self.uses(name.to_owned(), span);
            }
            rest = &rest[end..];
        }
    }

    /// Macro tokens that do not parse as expressions: every identifier that is not
    /// reached through `.` or `::`. A string literal is text, not a format string, since
    /// which macro would read it as one is unknown.
    fn tokens(&mut self, tokens: proc_macro2::TokenStream) {
        let mut after_access = false;
        let mut tokens = tokens.into_iter().peekable();
        while let Some(token) = tokens.next() {
            let access = match &token {
                proc_macro2::TokenTree::Ident(ident) => {
                    let path_head = matches!(tokens.peek(), Some(proc_macro2::TokenTree::Punct(p)) if p.as_char() == ':');
                    if !after_access && !path_head {
                        self.uses(ident.to_string(), ident.span());
                    }
                    false
                }
                proc_macro2::TokenTree::Group(group) => {
                    self.tokens(group.stream());
                    false
                }
                proc_macro2::TokenTree::Literal(_) => false,
                proc_macro2::TokenTree::Punct(punct) => matches!(punct.as_char(), '.' | ':'),
            };
            after_access = access;
        }
    }
}

impl<'ast> Visit<'ast> for Uses {
    fn visit_expr_path(&mut self, path: &'ast syn::ExprPath) {
        let plain = path.qself.is_none()
            && path.path.leading_colon.is_none()
            && path.path.segments.len() == 1
            && path.path.segments[0].arguments.is_none();
        if plain {
            let ident = &path.path.segments[0].ident;
            self.uses(ident.to_string(), ident.span());
        }
    }

    fn visit_expr_closure(&mut self, closure: &'ast syn::ExprClosure) {
        let pats: Vec<&Pat> = closure.inputs.iter().collect();
        self.scoped(&pats, |uses| uses.visit_expr(&closure.body));
    }

    fn visit_block(&mut self, block: &'ast syn::Block) {
        // A `let` shadows from the next statement on.
        self.scopes.push(BTreeSet::new());
        for stmt in &block.stmts {
            match stmt {
                syn::Stmt::Local(local) => {
                    if let Some(init) = &local.init {
                        self.visit_expr(&init.expr);
                        if let Some((_, diverge)) = &init.diverge {
                            self.visit_expr(diverge);
                        }
                    }
                    if let Some(scope) = self.scopes.last_mut() {
                        bindings(&local.pat, scope);
                    }
                }
                // A nested item sees none of the expression's variables.
                syn::Stmt::Item(_) => {}
                other => self.visit_stmt(other),
            }
        }
        self.scopes.pop();
    }

    fn visit_arm(&mut self, arm: &'ast syn::Arm) {
        self.scoped(&[&arm.pat], |uses| {
            if let Pat::Guard(guarded) = &arm.pat {
                uses.visit_expr(&guarded.guard);
            }
            uses.visit_expr(&arm.body);
        });
    }

    fn visit_expr_if(&mut self, expr: &'ast syn::ExprIf) {
        self.conditional(&expr.cond, |uses| uses.visit_block(&expr.then_branch));
        if let Some((_, otherwise)) = &expr.else_branch {
            self.visit_expr(otherwise);
        }
    }

    fn visit_expr_while(&mut self, expr: &'ast syn::ExprWhile) {
        self.conditional(&expr.cond, |uses| uses.visit_block(&expr.body));
    }

    fn visit_expr_for_loop(&mut self, expr: &'ast syn::ExprForLoop) {
        self.visit_expr(&expr.expr);
        self.scoped(&[&expr.pat], |uses| uses.visit_block(&expr.body));
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        let name = mac
            .path
            .segments
            .last()
            .map(|segment| segment.ident.to_string())
            .unwrap_or_default();
        if TEXT_MACROS.contains(&name.as_str()) {
            return;
        }
        let parsed = mac.parse_body_with(Punctuated::<Expr, syn::Token![,]>::parse_terminated);
        match parsed {
            Ok(args) if FORMAT_MACROS.contains(&name.as_str()) => self.format_args(&args),
            Ok(args) => {
                for arg in &args {
                    self.visit_expr(arg);
                }
            }
            Err(_) => self.tokens(mac.tokens.clone()),
        }
    }
}

/// Macros whose first string literal is a format string that can capture variables.
const FORMAT_MACROS: &[&str] = &[
    "format",
    "format_args",
    "write",
    "writeln",
    "print",
    "println",
    "eprint",
    "eprintln",
    "panic",
    "unreachable",
    "todo",
    "unimplemented",
];

/// Macros that read their tokens as text, never as variables.
const TEXT_MACROS: &[&str] = &[
    "stringify",
    "concat",
    "line",
    "column",
    "file",
    "module_path",
    "env",
    "option_env",
    "include",
    "include_str",
    "include_bytes",
];

/// The names a pattern binds.
fn bindings(pat: &Pat, out: &mut BTreeSet<String>) {
    struct Bindings<'a>(&'a mut BTreeSet<String>);
    impl<'ast> Visit<'ast> for Bindings<'_> {
        fn visit_pat_ident(&mut self, pat: &'ast PatIdent) {
            self.0.insert(pat.ident.to_string());
            syn::visit::visit_pat_ident(self, pat);
        }
    }
    Bindings(out).visit_pat(pat);
}

#[cfg(test)]
mod tests;
