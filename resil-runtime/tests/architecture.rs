//! The runtime's layers, kept: each module imports only from the layers its row of the crate
//! docs' table allows (`src/lib.rs`, "Layers"). Imports are read as Rust (syn): `use` trees
//! (globs included), paths in code and types, and paths inside macro invocations. A path is
//! resolved from the module of the file that writes it, whether it starts with `crate::`,
//! `super::` or `self::`, to the top-level module it lands in; a name re-exported at the crate
//! root counts as the module it comes from, and a glob of the crate root as every module.

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

/// The module a file under `src/` is: `a/b.rs` is `a::b`, `a/mod.rs` is `a`.
fn module_of(file: &str) -> Vec<String> {
    let mut module: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if module.len() > 1 && module.last().is_some_and(|last| last == "mod") {
        module.pop();
    }
    module
}

/// Where the paths of one file land: each path into this crate, resolved from the crate root
/// (empty for the crate root itself, a glob of it), and the names the file's own module
/// brings in with `use`, each with the path it names.
struct Landings<'f> {
    file: &'f str,
    /// The module being read: the file's, plus the inline `mod x { … }` blocks entered.
    module: Vec<String>,
    /// Every module that is a file: a path may start with a child module's name.
    files: &'f BTreeSet<Vec<String>>,
    found: BTreeSet<Vec<String>>,
    uses: BTreeMap<String, Vec<String>>,
}

impl<'f> Landings<'f> {
    fn of(file: &'f str, text: &str, files: &'f BTreeSet<Vec<String>>) -> Self {
        let mut landings = Landings {
            file,
            module: if file == "lib.rs" {
                Vec::new()
            } else {
                module_of(file)
            },
            files,
            found: BTreeSet::new(),
            uses: BTreeMap::new(),
        };
        let parsed = syn::parse_file(text).unwrap_or_else(|e| panic!("{file}: {e}"));
        landings.visit_file(&parsed);
        landings
    }

    /// Resolves `segments` as written from the current module, if they lead into this crate:
    /// from `crate`, `self`, `super`, or a child module's name. A path that starts elsewhere
    /// (another crate, a name in scope) is not this test's.
    fn resolve(&self, segments: &[String]) -> Option<Vec<String>> {
        let first = segments.first()?;
        let child = [self.module.as_slice(), std::slice::from_ref(first)].concat();
        let (mut path, rest) = match first.as_str() {
            "crate" => (Vec::new(), &segments[1..]),
            "self" | "super" => (self.module.clone(), segments),
            _ if self.files.contains(&child) => (self.module.clone(), segments),
            _ => return None,
        };
        for segment in rest {
            match segment.as_str() {
                // `super::super::…`: one level up each.
                "super" => assert!(
                    path.pop().is_some(),
                    "{}: `{}` climbs above the crate root",
                    self.file,
                    segments.join("::")
                ),
                // `self::…`, or `{self, …}` in a use group: the module named so far.
                "self" => {}
                _ => path.push(segment.clone()),
            }
        }
        Some(path)
    }

    /// Notes where `segments` land, if they lead into this crate.
    fn land(&mut self, segments: &[String]) {
        if let Some(path) = self.resolve(segments) {
            self.found.insert(path);
        }
    }

    /// A name the file's module brings in with `use`, and where it comes from.
    fn bring(&mut self, name: String, segments: &[String]) {
        let Some(path) = self.resolve(segments) else {
            return;
        };
        if self.module == module_of(self.file) || self.file == "lib.rs" {
            self.uses.insert(name, path.clone());
        }
        self.found.insert(path);
    }
}

impl Landings<'_> {
    /// The old first-segment view, for the layers: the top-level item each path names
    /// (`None`: the crate root).
    fn tops(&self) -> BTreeSet<Option<String>> {
        self.found
            .iter()
            .map(|path| path.first().cloned())
            .collect()
    }

    /// `prefix` is the path of the use tree above `tree`.
    fn use_tree(&mut self, tree: &syn::UseTree, prefix: &mut Vec<String>) {
        match tree {
            syn::UseTree::Path(path) => {
                prefix.push(path.ident.to_string());
                self.use_tree(&path.tree, prefix);
                prefix.pop();
            }
            syn::UseTree::Name(name) => {
                let name = name.ident.to_string();
                self.bring(name.clone(), &[prefix.as_slice(), &[name]].concat());
            }
            syn::UseTree::Rename(rename) => {
                let segments = [prefix.as_slice(), &[rename.ident.to_string()]].concat();
                self.bring(rename.rename.to_string(), &segments);
            }
            // A glob lands in the module its prefix names.
            syn::UseTree::Glob(_) => self.land(prefix),
            syn::UseTree::Group(group) => {
                for tree in &group.items {
                    self.use_tree(tree, prefix);
                }
            }
        }
    }

    /// Paths in a macro's tokens: `crate`, `$crate`, `self` or `super` followed by `::` and
    /// more segments, where no `::` comes before it.
    fn tokens(&mut self, tokens: proc_macro2::TokenStream) {
        use proc_macro2::TokenTree;
        let tokens: Vec<_> = tokens.into_iter().collect();
        let colons = |at: usize| {
            [at, at + 1].iter().all(|&at| {
                matches!(tokens.get(at), Some(TokenTree::Punct(punct)) if punct.as_char() == ':')
            })
        };
        for (at, token) in tokens.iter().enumerate() {
            match token {
                TokenTree::Ident(ident)
                    if ["crate", "self", "super"].contains(&ident.to_string().as_str())
                        && !(at >= 2 && colons(at - 2)) =>
                {
                    let mut segments = vec![ident.to_string()];
                    let mut next = at + 1;
                    while colons(next) {
                        let Some(TokenTree::Ident(segment)) = tokens.get(next + 2) else {
                            break;
                        };
                        segments.push(segment.to_string());
                        next += 3;
                    }
                    if segments.len() > 1 {
                        self.land(&segments);
                    }
                }
                TokenTree::Group(group) => self.tokens(group.stream()),
                _ => {}
            }
        }
    }
}

impl<'ast> Visit<'ast> for Landings<'_> {
    fn visit_item_use(&mut self, use_: &'ast syn::ItemUse) {
        if use_.leading_colon.is_none() {
            self.use_tree(&use_.tree, &mut Vec::new());
        }
    }

    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        // An inline `mod x { … }` is a level of its own (`super` inside it is this module); a
        // `mod x;` is read from its own file.
        if module.content.is_some() {
            self.module.push(module.ident.to_string());
            syn::visit::visit_item_mod(self, module);
            self.module.pop();
        }
    }

    // `pub(super)`, `pub(in crate::…)` say who may see an item; they import nothing.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_path(&mut self, path: &'ast syn::Path) {
        // A lone `self` is a receiver, not a module.
        if path.leading_colon.is_none() && path.segments.len() > 1 {
            let segments: Vec<String> = (path.segments.iter())
                .map(|segment| segment.ident.to_string())
                .collect();
            self.land(&segments);
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

/// Every import across layers that the table in `lib` does not allow, in `files` (each a
/// path under `src/` and its text), as (file, module imported).
fn breaches_in(lib: &str, files: &[(String, String)]) -> BTreeSet<(String, String)> {
    let layers = layers(lib);
    let (modules, reexported) = root(&syn::parse_file(lib).unwrap());
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
    let mut found = BTreeSet::new();
    for (name, text) in files {
        let module = &module_of(name)[0];
        let own = &layers[layer_of(module).unwrap_or_else(|| panic!("{name}: no layer"))];
        let mut imported = BTreeSet::new();
        for landing in Landings::of(name, text, &BTreeSet::new()).tops() {
            match landing {
                None => imported.extend(modules.iter().cloned()),
                Some(first) if modules.contains(&first) => {
                    imported.insert(first);
                }
                Some(first) => match reexported.get(&first) {
                    Some(module) => {
                        imported.insert(module.clone());
                    }
                    None => panic!("{name}: cannot tell which module `crate::{first}` is"),
                },
            }
        }
        for imported in imported {
            let Some(theirs) = layer_of(&imported) else {
                continue;
            };
            let theirs = &layers[theirs].name;
            if &imported != module && theirs != &own.name && !own.may_import.contains(theirs) {
                found.insert((name.clone(), imported));
            }
        }
    }
    found
}

/// [`breaches_in`] the runtime's sources.
fn breaches() -> BTreeSet<(String, String)> {
    let files = sources();
    let lib = &files.iter().find(|(name, _)| name == "lib.rs").unwrap().1;
    let files: Vec<(String, String)> = (files.iter())
        .filter(|(name, _)| name != "lib.rs")
        .cloned()
        .collect();
    breaches_in(lib, &files)
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

/// The runtime's sources, each as its path under `src/` and its text.
fn sources() -> Vec<(String, String)> {
    let src = src();
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    paths
        .into_iter()
        .map(|path| {
            let name = (path.strip_prefix(&src).unwrap().to_string_lossy()).replace('\\', "/");
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect()
}

/// Which files each file imports from: a path lands in the file of the deepest module it
/// names, through the names a module brings in with `use` (a name re-exported by a parent
/// lands where it is defined, not in the parent). The crate root, which re-exports the
/// public names, is in no edge.
fn file_imports(files: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeMap<Vec<String>, &str> = (files.iter())
        .map(|(name, _)| {
            let module = if name == "lib.rs" {
                Vec::new()
            } else {
                module_of(name)
            };
            (module, name.as_str())
        })
        .collect();
    let known: BTreeSet<Vec<String>> = modules.keys().cloned().collect();
    let read: Vec<(&str, Landings)> = (files.iter())
        .map(|(name, text)| (name.as_str(), Landings::of(name, text, &known)))
        .collect();
    let uses: BTreeMap<Vec<String>, &BTreeMap<String, Vec<String>>> = (read.iter())
        .map(|(name, landings)| (landings_module(name), &landings.uses))
        .collect();
    let file_of = |path: &[String]| -> Option<&str> {
        let mut path = path.to_vec();
        // A name re-exported through re-exports: a few hops at most.
        for _ in 0..8 {
            let deepest = (0..=path.len())
                .rev()
                .find(|k| known.contains(&path[..*k]))?;
            let brought = (path.get(deepest))
                .and_then(|name| uses.get(&path[..deepest])?.get(name))
                .filter(|source| **source != path[..=deepest]);
            match brought {
                Some(source) => path = [source.as_slice(), &path[deepest + 1..]].concat(),
                None => return Some(modules[&path[..deepest]]),
            }
        }
        None
    };
    let mut imports = BTreeMap::new();
    for (name, landings) in &read {
        if *name == "lib.rs" {
            continue;
        }
        let targets: BTreeSet<String> = (landings.found.iter())
            .filter_map(|path| file_of(path))
            .filter(|target| target != name && *target != "lib.rs")
            .filter(|target| !kin(&landings_module(name), &landings_module(target)))
            .map(str::to_owned)
            .collect();
        imports.insert((*name).to_owned(), targets);
    }
    imports
}

/// Whether one module is inside the other: a parent declares its children and uses what
/// they define, a child is written in its parent's terms (tower's `retry/future.rs` starts
/// with `use super::{Policy, Retry}`), and the two are one piece. Siblings and cousins are
/// not: each must be readable without the other's internals.
fn kin(a: &[String], b: &[String]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn landings_module(file: &str) -> Vec<String> {
    if file == "lib.rs" {
        Vec::new()
    } else {
        module_of(file)
    }
}

/// The groups of two or more files that import each other, directly or around a cycle (the
/// strongly connected components of the import graph), each sorted.
fn cycles(imports: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut next = vec![from];
        while let Some(file) = next.pop() {
            for target in imports.get(file).into_iter().flatten() {
                if seen.insert(target.clone()) {
                    next.push(target);
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        imports.keys().map(|file| (file, reach(file))).collect();
    let mut groups: BTreeSet<Vec<String>> = BTreeSet::new();
    for (file, from_it) in &reached {
        let group: Vec<String> = (from_it.iter())
            .filter(|other| reached.get(other).is_some_and(|back| back.contains(*file)))
            .cloned()
            .collect();
        if group.len() >= 2 {
            groups.insert(group);
        }
    }
    groups.into_iter().collect()
}

/// The pairs of files allowed to import each other, each with its reason. Anything else that
/// imports in a circle (a pair not listed, or three files and more) fails: a circle is one
/// piece of code in several files, where neither can be read, tested or changed alone.
const PAIRS: &[(&str, &str, &str)] = &[
    (
        "breaker/summed.rs",
        "seams/window.rs",
        "a shared window's batch, which is what a store sees, and the summed window that sends \
         it and reads its sums back: one exchange, split so that a store sees no breaker",
    ),
    (
        "seams/links.rs",
        "seams/news.rs",
        "a link and its news are the two directions of one exchange with the store: the link \
         sends this instance's announcements, the news brings the peers' back to it",
    ),
    (
        "shared/breaker.rs",
        "shared/store/mod.rs",
        "Redis's breakers: the store runs their scripts and hands its subscription's messages \
         to breaker.rs, which reads them",
    ),
];

#[test]
fn no_files_import_each_other_beyond_the_listed_pairs() {
    let imports = file_imports(&sources());
    let sorted = |files: &[&str]| {
        let mut files: Vec<String> = files.iter().map(|file| (*file).to_owned()).collect();
        files.sort();
        files
    };
    let listed: BTreeSet<Vec<String>> = (PAIRS.iter()).map(|(a, b, _)| sorted(&[a, b])).collect();
    let unlisted: Vec<_> = (cycles(&imports).into_iter())
        .filter(|group| !listed.contains(group))
        .map(|group| {
            let edges: Vec<String> = (group.iter())
                .flat_map(|from| {
                    (imports[from].iter())
                        .filter(|to| group.contains(to))
                        .map(move |to| format!("{from} -> {to}"))
                })
                .collect();
            edges
        })
        .collect();
    assert!(
        unlisted.is_empty(),
        "files that import each other (directly or around a circle), by their imports: \
         {unlisted:#?}\nmove what both need into one of them or into a file below both, or, \
         for a pair that is one piece, list it in PAIRS with the reason"
    );
}

/// The cycle check itself, on small sources: a circle of three siblings is found, a parent and
/// its child are one piece, and a name a parent re-exports lands where it is defined.
#[test]
fn the_cycle_check_sees_circles_through_re_exports_and_not_kin() {
    let files = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        (pairs.iter())
            .map(|(name, text)| ((*name).to_owned(), (*text).to_owned()))
            .collect()
    };
    let circle = files(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "use crate::b::B; pub struct A;"),
        ("b.rs", "use crate::c::C; pub struct B;"),
        ("c.rs", "pub struct C(crate::a::A);"),
    ]);
    assert_eq!(
        cycles(&file_imports(&circle)),
        vec![vec![
            "a.rs".to_owned(),
            "b.rs".to_owned(),
            "c.rs".to_owned()
        ]]
    );
    // A child written in its parent's terms, and a parent re-exporting it: one piece.
    let kin = files(&[
        ("lib.rs", "mod p;"),
        ("p/mod.rs", "mod child; pub use child::Child; pub struct P;"),
        ("p/child.rs", "use super::P; pub struct Child(P);"),
    ]);
    assert!(cycles(&file_imports(&kin)).is_empty());
    // `x` takes `Y` through p's re-export, which lands in p/y.rs, not p/mod.rs: no circle
    // with p/mod.rs, which uses x.
    let through = files(&[
        ("lib.rs", "mod p; mod x;"),
        ("p/mod.rs", "mod y; pub use y::Y; fn f(_: crate::x::X) {}"),
        ("p/y.rs", "pub struct Y;"),
        ("x.rs", "pub struct X(crate::p::Y);"),
    ]);
    let imports = file_imports(&through);
    assert_eq!(imports["x.rs"], BTreeSet::from(["p/y.rs".to_owned()]));
    assert!(cycles(&imports).is_empty());
}

/// The checker itself, on small sources set in the real table's layers: `gate` is a
/// primitive, `policy` and `execution` are above it, `sync` is below.
mod checker {
    use super::*;

    fn breaches_of(file: &str, text: &str) -> BTreeSet<(String, String)> {
        let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
        breaches_in(&lib, &[(file.to_owned(), text.to_owned())])
    }

    fn breach(file: &str, module: &str) -> (String, String) {
        (file.to_owned(), module.to_owned())
    }

    #[test]
    fn a_primitive_reaching_the_policy_through_super_super_is_reported() {
        let found = breaches_of("gate/model.rs", "use super::super::policy::Policy;");
        assert_eq!(found, BTreeSet::from([breach("gate/model.rs", "policy")]));
    }

    #[test]
    fn a_glob_of_its_own_module_in_mod_tests_is_not_reported() {
        let text =
            "#[cfg(test)]\nmod tests {\n    use super::*;\n    use super::super::RateGate;\n}";
        assert_eq!(breaches_of("gate/model.rs", text), BTreeSet::new());
    }

    #[test]
    fn inside_an_inline_module_super_climbs_one_level_more() {
        let text = "#[cfg(test)]\nmod tests {\n    use super::super::policy::Policy;\n}";
        assert_eq!(
            breaches_of("gate.rs", text),
            BTreeSet::from([breach("gate.rs", "policy")])
        );
    }

    #[test]
    fn globs_of_a_higher_module_and_of_the_crate_root_are_reported() {
        let found = breaches_of("gate.rs", "use crate::policy::*;");
        assert_eq!(found, BTreeSet::from([breach("gate.rs", "policy")]));
        // The root's glob brings in every module: those above a primitive are reported,
        // those below it are not.
        let found = breaches_of("gate/model.rs", "use super::super::*;");
        assert!(
            found.contains(&breach("gate/model.rs", "policy")),
            "{found:?}"
        );
        assert!(
            found.contains(&breach("gate/model.rs", "execution")),
            "{found:?}"
        );
        assert!(
            !found.contains(&breach("gate/model.rs", "sync")),
            "{found:?}"
        );
    }

    #[test]
    fn paths_in_code_types_and_macros_are_resolved_from_the_file_module() {
        let text = "fn f() -> self::super::super::operation::OperationId {\n\
                    \x20   super::super::execution::start();\n\
                    \x20   format!(\"{}\", $crate::events::NAME)\n\
                    }";
        let found = breaches_of("gate/model.rs", text);
        let expected = ["operation", "execution", "events"].map(|m| breach("gate/model.rs", m));
        assert_eq!(found, BTreeSet::from(expected));
    }

    #[test]
    fn a_visibility_and_a_path_to_the_own_layer_are_not_imports() {
        let text = "pub(super) fn f(d: super::super::deadline::Limits) -> self::Slot { d.0 }";
        assert_eq!(breaches_of("gate/model.rs", text), BTreeSet::new());
    }
}
