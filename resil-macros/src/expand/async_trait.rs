//! A method that `#[async_trait]` rewrote before `#[resilient]` saw it (the attribute on the
//! `impl` or the trait expands first): its body is an `async move` block returned boxed. The
//! method is read as it was written, checked and expanded as such, and the expansion takes
//! the body's place inside the block; the rewritten signature stays (as tracing's
//! `#[instrument]` does, see tracing-attributes' `AsyncInfo`).

use proc_macro2::TokenStream;
use syn::visit_mut::{self, VisitMut};
use syn::{
    Block, Expr, FnArg, Ident, ItemFn, Local, Pat, PatIdent, PatType, ReturnType, Signature, Stmt,
    Type,
};

// Input:  fn f<'life0, 'async_trait>(&'life0 self, n: String)
//             -> Pin<Box<dyn Future<Output = R> + Send + 'async_trait>> where ... {
//             Box::pin(async move {
//                 if let Some(__ret) = None::<R> { return __ret; }
//                 let __self = self;
//                 let n = n;
//                 let __ret: R = { body };
//                 __ret
//             })
//         }
// Read:   async fn f<'life0, 'async_trait>(__self: &'life0 Self, n: String) -> R { body }
//         (`self` in the body is `__self` already; an argument's `mut`, and a pattern that
//         async-trait passes as `__arg1`, are read back from where the block rebinds them)
// Output: the input, with `{ body }` replaced by the body the plain expansion gives.
pub(super) struct AsyncTrait {
    /// The method as `#[async_trait]` left it, the body taken out of its slot.
    rewritten: ItemFn,
    /// The signature as it was written, near enough to check and expand it.
    pub(super) sig: Signature,
    pub(super) body: Block,
}

impl AsyncTrait {
    /// The method, if `#[async_trait]` rewrote it.
    pub(super) fn recognise(function: &ItemFn) -> Option<Self> {
        if function.sig.asyncness.is_some() {
            return None;
        }
        let ReturnType::Type(_, output) = &function.sig.output else {
            return None;
        };
        let output = future_output(output)?.clone();
        let mut rewritten = function.clone();
        let block = boxed_async_block(&mut rewritten.block)?;
        let mut slot = Slot::default();
        slot.visit_block_mut(block);
        let body = slot.body?;
        let mut sig = function.sig.clone();
        sig.asyncness = Some(syn::Token![async](sig.fn_token.span));
        sig.output = ReturnType::Type(Default::default(), Box::new(output));
        for input in &mut sig.inputs {
            *input = match input {
                FnArg::Receiver(receiver) => {
                    let by_value = receiver.reference.is_none();
                    FnArg::Typed(PatType {
                        attrs: Vec::new(),
                        pat: Box::new(Pat::Ident(PatIdent {
                            attrs: Vec::new(),
                            by_ref: None,
                            mutability: receiver.mutability.filter(|_| by_value),
                            ident: Ident::new("__self", receiver.self_token.span),
                            subpat: None,
                        })),
                        colon_token: Default::default(),
                        ty: receiver.ty.clone(),
                    })
                }
                FnArg::Typed(arg) => {
                    let mut arg = arg.clone();
                    if let Pat::Ident(ident) = &*arg.pat {
                        if let Some((_, pat)) =
                            slot.patterns.iter().find(|(name, _)| *name == ident.ident)
                        {
                            arg.pat = Box::new(pat.clone());
                        }
                    }
                    FnArg::Typed(arg)
                }
            };
        }
        Some(AsyncTrait {
            rewritten,
            sig,
            body,
        })
    }

    /// The rewritten method, with `body` in the body's slot and `attrs` added to its own.
    pub(super) fn with_body(self, attrs: Vec<syn::Attribute>, body: TokenStream) -> ItemFn {
        let mut function = self.rewritten;
        function.attrs.extend(attrs);
        if let Some(block) = boxed_async_block(&mut function.block) {
            Fill(Some(body)).visit_block_mut(block);
        }
        function
    }
}

/// `R` in `Pin<Box<dyn Future<Output = R> + ..>>`.
fn future_output(ty: &Type) -> Option<&Type> {
    let pinned = type_argument(ty, "Pin")?;
    let Type::TraitObject(object) = type_argument(pinned, "Box")? else {
        return None;
    };
    object.bounds.iter().find_map(|bound| {
        let syn::TypeParamBound::Trait(bound) = bound else {
            return None;
        };
        let last = bound.path.segments.last()?;
        let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
            return None;
        };
        if last.ident != "Future" {
            return None;
        }
        args.args.iter().find_map(|arg| match arg {
            syn::GenericArgument::AssocType(assoc) if assoc.ident == "Output" => Some(&assoc.ty),
            _ => None,
        })
    })
}

/// `T` in `Name<T>`.
fn type_argument<'t>(ty: &'t Type, name: &str) -> Option<&'t Type> {
    let Type::Path(path) = ty else {
        return None;
    };
    let last = path.path.segments.last()?;
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.first() {
        Some(syn::GenericArgument::Type(ty)) if last.ident == name && args.args.len() == 1 => {
            Some(ty)
        }
        _ => None,
    }
}

/// The block of the function's last expression, `Box::pin(async move { .. })`.
fn boxed_async_block(block: &mut Block) -> Option<&mut Block> {
    let Some(Stmt::Expr(Expr::Call(call), None)) = block.stmts.last_mut() else {
        return None;
    };
    let Expr::Path(callee) = &*call.func else {
        return None;
    };
    let mut segments = callee.path.segments.iter().rev();
    let (pin, boxed) = (segments.next()?, segments.next()?);
    if pin.ident != "pin" || boxed.ident != "Box" || call.args.len() != 1 {
        return None;
    }
    match call.args.first_mut()? {
        Expr::Async(future) if future.capture.is_some() => Some(&mut future.block),
        _ => None,
    }
}

/// Whether `local` is the body's slot, `let __ret: R = ..`.
fn is_slot(local: &Local) -> bool {
    matches!(&local.pat, Pat::Type(typed) if matches!(&*typed.pat, Pat::Ident(ident) if ident.ident == "__ret"))
}

/// Finds the body's slot, `let __ret: R = { body };`, and takes the body out; notes the
/// patterns of arguments async-trait passes by position. The slot may sit deeper than the
/// block's own statements when another attribute (`#[tracing::instrument]`) wrapped them.
#[derive(Default)]
struct Slot {
    body: Option<Block>,
    /// How async-trait rebinds each argument in the block, with its `mut` and its pattern:
    /// `(n, mut n)`, `(__arg1, (a, b))`.
    patterns: Vec<(Ident, Pat)>,
}

impl VisitMut for Slot {
    fn visit_local_mut(&mut self, local: &mut Local) {
        if self.body.is_some() {
            return;
        }
        let slot = is_slot(local);
        let Some(init) = &mut local.init else {
            return visit_mut::visit_local_mut(self, local);
        };
        if slot {
            if let Expr::Block(body) = &*init.expr {
                self.body = Some(body.block.clone());
                *init.expr = Expr::Verbatim(TokenStream::new());
                return;
            }
        }
        // `let mut n = n;`, `let (a, b) = { let __arg1 = __arg1; __arg1 };`
        let passed = match &*init.expr {
            Expr::Path(path) => Some(path),
            Expr::Block(block) => match block.block.stmts.last() {
                Some(Stmt::Expr(Expr::Path(path), None)) => Some(path),
                _ => None,
            },
            _ => None,
        };
        if let Some(argument) = passed.and_then(|path| path.path.get_ident()) {
            self.patterns.push((argument.clone(), local.pat.clone()));
            // `mut n` then mutates nothing when each attempt takes its own copy.
            local.attrs.push(syn::parse_quote!(#[allow(unused_mut)]));
        }
        visit_mut::visit_local_mut(self, local);
    }

    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
}

/// Puts the expansion into the emptied slot.
struct Fill(Option<TokenStream>);

impl VisitMut for Fill {
    fn visit_local_mut(&mut self, local: &mut Local) {
        if is_slot(local) {
            if let (Some(init), Some(body)) = (&mut local.init, self.0.take()) {
                if matches!(&*init.expr, Expr::Verbatim(tokens) if tokens.is_empty()) {
                    *init.expr = Expr::Verbatim(body);
                    return;
                }
                self.0 = Some(body);
            }
        }
        visit_mut::visit_local_mut(self, local);
    }

    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
}
