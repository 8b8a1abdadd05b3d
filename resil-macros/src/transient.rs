//! `#[derive(Transient)]`: `#[transient]` marks what is worth retrying, everything unmarked
//! is permanent.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Attribute, Data, DeriveInput, Fields, Member};

use crate::errors::Errors;

/// What a `#[transient(...)]` attribute says about a variant or a struct.
enum Marking {
    Permanent,
    /// `#[transient]`, `#[transient(retry_after = f)]`, `#[transient(throttle, ...)]`.
    Transient {
        retry_after: Option<Member>,
        throttle: bool,
    },
    /// `#[transient(by = status)]`: the field (a status code, say) decides.
    By {
        field: Member,
        retry_after: Option<Member>,
    },
    Transparent,
    /// `#[transient(route)]`: permanent here, worth another target of a route.
    MovesOn,
}

/// The match arms of the methods, one or more per variant.
#[derive(Default)]
struct Arms {
    is_transient: Vec<TokenStream>,
    retry_after: Vec<TokenStream>,
    is_throttle: Vec<TokenStream>,
    moves_on: Vec<TokenStream>,
}

pub(crate) fn derive(input: TokenStream) -> TokenStream {
    let input = match syn::parse2::<DeriveInput>(input) {
        Ok(input) => input,
        Err(error) => return error.into_compile_error(),
    };
    match expand(&input) {
        Ok(tokens) => tokens,
        Err(error) => {
            // Still implement the trait, so the mistake does not cascade into "`X` is not
            // `Transient`" errors wherever the type is used.
            let name = &input.ident;
            let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
            let error = error.into_compile_error();
            quote! {
                #error
                impl #impl_generics ::resil::__private::Transient for #name #ty_generics #where_clause {
                    fn is_transient(&self) -> bool { false }
                }
            }
        }
    }
}

// Input:  enum E { #[transient] Busy, #[transient(retry_after = wait)] Limited { wait: .. }, Bad }
// Output: impl Transient for E {
//             fn is_transient(&self) -> bool { match self { Self::Busy => true, Self::Limited { .. } => true, Self::Bad => false } }
//             fn retry_after(&self) -> Option<Duration> { match self { Self::Limited { wait, .. } => wait.retry_after(), _ => None } }
//         }
fn expand(input: &DeriveInput) -> syn::Result<TokenStream> {
    let mut errors = Errors::default();
    let mut arms = Arms::default();
    match &input.data {
        Data::Enum(data) => {
            if let Some(attr) = input.attrs.iter().find(|a| a.path().is_ident("transient")) {
                errors.push(
                    attr.span(),
                    "on an enum, put #[transient] on the variants that are worth retrying, not on the enum",
                );
            }
            for variant in &data.variants {
                reject_field_attributes(&variant.fields, &mut errors);
                let ident = &variant.ident;
                let pattern = quote! { Self::#ident };
                match marking(
                    &variant.attrs,
                    &variant.fields,
                    variant.ident.span(),
                    &mut errors,
                ) {
                    Some(marking) => arms.add(&pattern, &variant.fields, marking),
                    None => continue,
                }
            }
        }
        Data::Struct(data) => {
            reject_field_attributes(&data.fields, &mut errors);
            if let Some(marking) =
                marking(&input.attrs, &data.fields, input.ident.span(), &mut errors)
            {
                arms.add(&quote! { Self }, &data.fields, marking);
            }
        }
        Data::Union(data) => {
            errors.push(
                data.union_token.span,
                "#[derive(Transient)] works on enums and structs, not unions: implement `resil::Transient` by hand",
            );
        }
    }
    errors.into_result()?;

    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let Arms {
        is_transient,
        retry_after,
        is_throttle,
        moves_on,
    } = arms;
    let is_transient = if is_transient.is_empty() {
        quote! { false }
    } else {
        quote! {
            #[allow(unreachable_patterns)]
            match self { #(#is_transient)* }
        }
    };
    let in_chains = in_chains(input);
    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics ::resil::__private::Transient for #name #ty_generics #where_clause {
            fn is_transient(&self) -> bool {
                #in_chains
                #is_transient
            }
            fn retry_after(&self) -> ::core::option::Option<::core::time::Duration> {
                #[allow(unreachable_patterns)]
                match self {
                    #(#retry_after)*
                    _ => ::core::option::Option::None,
                }
            }
            fn is_throttle(&self) -> bool {
                #[allow(unreachable_patterns)]
                match self {
                    #(#is_throttle)*
                    _ => false,
                }
            }
            fn moves_on(&self) -> bool {
                #[allow(unreachable_patterns)]
                match self {
                    #(#moves_on)*
                    _ => false,
                }
            }
        }
    })
}

// Output, for a type without generics, at the start of `is_transient`'s body:
//     ::resil::__resil_in_chains!(E, __RESIL_TRANSIENT_TYPE_E);
// which lists `|error| (&&Probe::<E>::new()).__resil_in_chain(error)` in TRANSIENT_TYPES_0_1.
/// Lists the type in the chains' list, so that a boxed `dyn Error` or an `anyhow::Error`
/// holding one is classified by its variant. Whether the type is an error at all (only an error
/// can be in a chain) is known after expansion: the probe's autoref picks the method that
/// downcasts when it is, the one that finds nothing when it is not. A generic type is left out:
/// each of its instances is a type of its own (`resil::transient_in_chains!` lists them).
fn in_chains(input: &DeriveInput) -> TokenStream {
    if !input.generics.params.is_empty() {
        return TokenStream::new();
    }
    let name = &input.ident;
    let element = format_ident!("__RESIL_TRANSIENT_TYPE_{}", name);
    quote! { ::resil::__resil_in_chains!(#name, #element); }
}

impl Arms {
    /// Adds the match arms of one variant (or of the struct).
    fn add(&mut self, pattern: &TokenStream, fields: &Fields, marking: Marking) {
        let all = match fields {
            Fields::Named(_) => quote! { { .. } },
            Fields::Unnamed(_) => quote! { (..) },
            Fields::Unit => quote! {},
        };
        let wait = |field: &Member| {
            let (binding, bind) = bind(fields, field);
            quote_spanned! {field.span()=>
                #pattern #binding => ::resil::__private::RetryAfterField::retry_after_field(#bind),
            }
        };
        let delegate = |field: &Member, method: TokenStream| {
            let (binding, bind) = bind(fields, field);
            quote_spanned! {field.span()=>
                #pattern #binding => ::resil::__private::Transient::#method(#bind),
            }
        };
        match marking {
            Marking::Permanent => self.is_transient.push(quote! { #pattern #all => false, }),
            Marking::MovesOn => {
                self.is_transient.push(quote! { #pattern #all => false, });
                self.moves_on.push(quote! { #pattern #all => true, });
            }
            Marking::Transient {
                retry_after,
                throttle,
            } => {
                self.is_transient.push(quote! { #pattern #all => true, });
                if throttle {
                    self.is_throttle.push(quote! { #pattern #all => true, });
                }
                self.retry_after.extend(retry_after.as_ref().map(wait));
            }
            Marking::By { field, retry_after } => {
                self.is_transient
                    .push(delegate(&field, quote!(is_transient)));
                self.is_throttle.push(delegate(&field, quote!(is_throttle)));
                self.moves_on.push(delegate(&field, quote!(moves_on)));
                self.retry_after.push(match &retry_after {
                    Some(retry_after) => wait(retry_after),
                    None => delegate(&field, quote!(retry_after)),
                });
            }
            Marking::Transparent => {
                let field = match fields {
                    Fields::Named(named) => {
                        Member::Named(named.named[0].ident.clone().expect("named field"))
                    }
                    _ => Member::Unnamed(0.into()),
                };
                self.is_transient
                    .push(delegate(&field, quote!(is_transient)));
                self.retry_after.push(delegate(&field, quote!(retry_after)));
                self.is_throttle.push(delegate(&field, quote!(is_throttle)));
                self.moves_on.push(delegate(&field, quote!(moves_on)));
            }
        }
    }
}

/// A pattern binding one field to `__resil_field`.
fn bind(fields: &Fields, member: &Member) -> (TokenStream, TokenStream) {
    let local = format_ident!("__resil_field");
    let pattern = match (fields, member) {
        (Fields::Named(_), Member::Named(name)) => quote! { { #name: #local, .. } },
        (_, Member::Unnamed(index)) => {
            let skipped = (0..index.index).map(|_| quote! { _, });
            quote! { ( #(#skipped)* #local, .. ) }
        }
        _ => quote! {},
    };
    (pattern, quote! { #local })
}

/// Reads the `#[transient]` attributes of one variant or struct. `None` after an error.
fn marking(
    attrs: &[Attribute],
    fields: &Fields,
    span: Span,
    errors: &mut Errors,
) -> Option<Marking> {
    let mut marks = attrs
        .iter()
        .filter(|attr| attr.path().is_ident("transient"));
    let Some(attr) = marks.next() else {
        return Some(Marking::Permanent);
    };
    if let Some(again) = marks.next() {
        errors.push(again.span(), "#[transient] is given twice here: keep one");
        return None;
    }
    if matches!(attr.meta, syn::Meta::Path(_)) {
        return Some(Marking::Transient {
            retry_after: None,
            throttle: false,
        });
    }
    let mut transparent = None;
    let mut throttle = None;
    let mut route = None;
    let mut by = None;
    let mut retry_after = None;
    let field = |meta: &syn::meta::ParseNestedMeta<'_>, example: &str| {
        meta.value()?
            .parse::<Member>()
            .map_err(|_| meta.error(example))
    };
    let parsed = attr.parse_nested_meta(|meta| {
        if meta.path.is_ident("transparent") {
            transparent = Some(meta.path.span());
        } else if meta.path.is_ident("throttle") {
            throttle = Some(meta.path.span());
        } else if meta.path.is_ident("route") {
            route = Some(meta.path.span());
        } else if meta.path.is_ident("by") {
            by = Some(field(&meta, "`by` names the field that decides, such as `#[transient(by = status)]` for a status code field")?);
        } else if meta.path.is_ident("retry_after") {
            retry_after = Some(field(&meta, "`retry_after` names the field that holds the wait, such as `#[transient(retry_after = wait)]` or `retry_after = 0` for a tuple field")?);
        } else {
            return Err(meta.error("#[transient] takes `retry_after = field`, `throttle`, `by = field`, `transparent` or `route`, such as `#[transient(retry_after = wait)]`"));
        }
        Ok(())
    });
    if let Err(error) = parsed {
        errors.push(error.span(), error);
        return None;
    }
    let named = [
        (&by, "`by` names a field of this variant whose type implements `Transient`, such as a status code"),
        (&retry_after, "`retry_after` names a field of this variant holding a `Duration` or `Option<Duration>`"),
    ];
    for (member, what) in named {
        if let Some(member) = member.as_ref().filter(|m| !field_exists(fields, m)) {
            errors.push(member.span(), format!("no such field here: {what}"));
            return None;
        }
    }
    if let Some(span) = route {
        if transparent.is_some() || throttle.is_some() || by.is_some() || retry_after.is_some() {
            errors.push(
                span,
                "`route` marks a permanent error of one target (a context too long for this model, a model not found): it is never retried on that target, so it takes no other option; remove them",
            );
            return None;
        }
        return Some(Marking::MovesOn);
    }
    if let Some(span) = transparent {
        if throttle.is_some() || by.is_some() || retry_after.is_some() {
            errors.push(
                span,
                "`transparent` takes everything from the inner error: remove the other options",
            );
            return None;
        }
        if fields.len() != 1 {
            errors.push(
                span,
                format!("#[transient(transparent)] delegates to the one field's own `Transient`, but there are {} fields: use it on a variant or struct with exactly one field", fields.len()),
            );
            return None;
        }
        return Some(Marking::Transparent);
    }
    if let Some(field) = by {
        if let Some(span) = throttle {
            errors.push(
                span,
                "with `by`, the field decides whether the error is a throttle: remove `throttle`",
            );
            return None;
        }
        return Some(Marking::By { field, retry_after });
    }
    if throttle.is_none() && retry_after.is_none() {
        errors.push(span, "#[transient()] is empty: write `#[transient]`");
        return None;
    }
    Some(Marking::Transient {
        retry_after,
        throttle: throttle.is_some(),
    })
}

fn field_exists(fields: &Fields, member: &Member) -> bool {
    match member {
        Member::Named(name) => fields
            .iter()
            .any(|field| field.ident.as_ref() == Some(name)),
        Member::Unnamed(index) => {
            (index.index as usize) < fields.len() && matches!(fields, Fields::Unnamed(_))
        }
    }
}

fn reject_field_attributes(fields: &Fields, errors: &mut Errors) {
    for field in fields {
        if let Some(attr) = field.attrs.iter().find(|a| a.path().is_ident("transient")) {
            errors.push(
                attr.span(),
                "#[transient] goes on a variant (or on a struct), not on a field: to name the field holding the wait, write `#[transient(retry_after = field)]` on the variant",
            );
        }
    }
}
