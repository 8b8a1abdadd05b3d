//! The runtime's layers, kept: each module imports only from the layers its row of the crate
//! docs' table allows (`src/lib.rs`, "Layers"). Imports are read as Rust (syn): `use` trees,
//! paths in code and types, and `crate::` inside macro invocations; a name re-exported at the
//! crate root counts as the module it comes from.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// Layer name, its modules, the layers it may import from.
struct Layer {
    name: String,
    modules: Vec<String>,
    may_import: BTreeSet<String>,
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The table in the crate docs: `//! | layer | modules | may import | what |` rows.
fn layers(lib: &str) -> Vec<Layer> {
    let mut layers: Vec<Layer> = Vec::new();
    // The table after the heading, to its last row: the header and the rule line first.
    let rows = lib
        .lines()
        .skip_while(|line| line.trim() != "//! # Layers")
        .skip_while(|line| !line.starts_with("//! |"))
        .map_while(|line| line.strip_prefix("//! |"))
        .skip(2);
    for row in rows {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let modules = cells[1]
            .split(',')
            .map(|m| m.trim().trim_matches('`').to_owned());
        let may_import = match cells[2] {
            "—" => BTreeSet::new(),
            "every layer" => layers.iter().map(|l| l.name.clone()).collect(),
            list => list.split(',').map(|l| l.trim().to_owned()).collect(),
        };
        for layer in &may_import {
            assert!(
                layers.iter().any(|l| &l.name == layer),
                "the layers table: `{}` may import `{layer}`, which is not a layer above it in the table",
                cells[0]
            );
        }
        layers.push(Layer {
            name: cells[0].to_owned(),
            modules: modules.collect(),
            may_import,
        });
    }
    assert!(layers.len() >= 5, "no layers table in src/lib.rs");
    layers
}

/// The crate root's modules, and each name it re-exports with the module it comes from.
fn root(lib: &syn::File) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let mut modules = BTreeSet::new();
    let mut reexported = BTreeMap::new();
    for item in &lib.items {
        match item {
            syn::Item::Mod(module) => {
                modules.insert(module.ident.to_string());
            }
            syn::Item::Use(use_) => {
                if let syn::UseTree::Path(path) = &use_.tree {
                    let mut names = Vec::new();
                    leaves(&path.tree, &mut names);
                    for name in names {
                        reexported.insert(name, path.ident.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    (modules, reexported)
}

/// The names a use tree brings in (as renamed).
fn leaves(tree: &syn::UseTree, names: &mut Vec<String>) {
    match tree {
        syn::UseTree::Path(path) => leaves(&path.tree, names),
        syn::UseTree::Name(name) => names.push(name.ident.to_string()),
        syn::UseTree::Rename(rename) => names.push(rename.rename.to_string()),
        syn::UseTree::Group(group) => group.items.iter().for_each(|t| leaves(t, names)),
        syn::UseTree::Glob(_) => {}
    }
}

/// Every first segment after `crate::` in a file.
#[derive(Default)]
struct CratePaths(BTreeSet<String>);

impl CratePaths {
    fn use_tree(&mut self, tree: &syn::UseTree, under_crate: bool) {
        match tree {
            syn::UseTree::Path(path) if under_crate => {
                self.0.insert(path.ident.to_string());
            }
            syn::UseTree::Path(path) => self.use_tree(&path.tree, path.ident == "crate"),
            syn::UseTree::Name(name) if under_crate => {
                self.0.insert(name.ident.to_string());
            }
            syn::UseTree::Rename(rename) if under_crate => {
                self.0.insert(rename.ident.to_string());
            }
            syn::UseTree::Group(group) => {
                for tree in &group.items {
                    self.use_tree(tree, under_crate);
                }
            }
            _ => {}
        }
    }

    fn tokens(&mut self, tokens: proc_macro2::TokenStream) {
        let tokens: Vec<_> = tokens.into_iter().collect();
        for (at, token) in tokens.iter().enumerate() {
            match token {
                proc_macro2::TokenTree::Ident(ident) if ident == "crate" => {
                    if let Some(proc_macro2::TokenTree::Ident(next)) = tokens.get(at + 3) {
                        self.0.insert(next.to_string());
                    }
                }
                proc_macro2::TokenTree::Group(group) => self.tokens(group.stream()),
                _ => {}
            }
        }
    }
}

impl<'ast> Visit<'ast> for CratePaths {
    fn visit_item_use(&mut self, use_: &'ast syn::ItemUse) {
        self.use_tree(&use_.tree, false);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let mut segments = path.segments.iter();
        if let (Some(first), Some(second)) = (segments.next(), segments.next()) {
            if first.ident == "crate" {
                self.0.insert(second.ident.to_string());
            }
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }
}

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// Every import across layers that the table does not allow, as (file, module imported).
fn breaches() -> BTreeSet<(String, String)> {
    let src = src();
    let lib_text = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let layers = layers(&lib_text);
    let (modules, reexported) = root(&syn::parse_file(&lib_text).unwrap());
    let layer_of = |module: &str| {
        layers
            .iter()
            .position(|layer| layer.modules.iter().any(|m| m == module))
    };
    for module in &modules {
        assert!(
            layer_of(module).is_some(),
            "module `{module}` is in no row of the layers table in src/lib.rs: add it to one"
        );
    }
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = BTreeSet::new();
    for file in files {
        let name = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if name == "lib.rs" {
            continue;
        }
        let module = name.split('/').next().unwrap().trim_end_matches(".rs");
        let own = &layers[layer_of(module).unwrap_or_else(|| panic!("{name}: no layer"))];
        let text = std::fs::read_to_string(&file).unwrap();
        let mut paths = CratePaths::default();
        paths.visit_file(&syn::parse_file(&text).unwrap_or_else(|e| panic!("{name}: {e}")));
        for first in paths.0 {
            let imported = if modules.contains(&first) {
                first.clone()
            } else if let Some(module) = reexported.get(&first) {
                module.clone()
            } else {
                panic!("{name}: cannot tell which module `crate::{first}` is");
            };
            let Some(theirs) = layer_of(&imported) else {
                continue;
            };
            let theirs = &layers[theirs].name;
            if imported != module && theirs != &own.name && !own.may_import.contains(theirs) {
                found.insert((name.clone(), imported));
            }
        }
    }
    found
}

#[test]
fn each_module_imports_only_from_the_layers_its_row_allows() {
    let found = breaches();
    assert!(
        found.is_empty(),
        "imports from a layer the table does not allow (src/lib.rs, \"Layers\"): {found:#?}\n\
         depend on a seam defined below instead, or move the item to the layer both use"
    );
}
