//! `LayerMap`: a record's per-layer squared norms, keyed by layer name, held as a small
//! vector sorted by name with the names shared between records.
//!
//! A run reports the same few (to a few thousand) layer names at every step. Held as a
//! `BTreeMap<String, _>` per record, 10⁵ records of 4 layers took 10⁵ tree nodes of ~460
//! bytes and 4·10⁵ name strings, and every pass over the layers chased pointers into cold
//! memory (issue 15). Here a record holds one vector of (name, norms) pairs, and the readers
//! give every record of a name the same shared string ([`intern`]).

use crate::record::step::LayerSq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use smallvec::SmallVec;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A layer name, shared between the records that report it.
pub type LayerName = Arc<str>;

/// Per-layer squared norms of one record, in layer-name order (byte order, as a
/// `BTreeMap<String, _>` iterates), one entry per name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LayerMap {
    /// Up to four layers held inline: most runs report a few, and 10⁵ records then need no
    /// allocation of their own (more spill to the heap as a `Vec` would).
    entries: SmallVec<[(LayerName, LayerSq); 4]>,
}

impl LayerMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty map with room for `n` layers.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            entries: SmallVec::with_capacity(n),
        }
    }

    fn position(&self, name: &str) -> Result<usize, usize> {
        self.entries.binary_search_by(|(n, _)| n.as_ref().cmp(name))
    }

    /// Set the norms of layer `name`; returns the ones it replaces.
    pub fn insert(&mut self, name: impl Into<LayerName>, sq: LayerSq) -> Option<LayerSq> {
        let name = name.into();
        // Readers insert in name order: the usual insert is a push.
        if self.entries.last().is_none_or(|(last, _)| *last < name) {
            self.entries.push((name, sq));
            return None;
        }
        match self.position(&name) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, sq)),
            Err(i) => {
                self.entries.insert(i, (name, sq));
                None
            }
        }
    }

    /// The norms of layer `name`, inserting `make()` first when it has none.
    pub fn get_or_insert_with(
        &mut self,
        name: impl Into<LayerName> + AsRef<str>,
        make: impl FnOnce() -> LayerSq,
    ) -> &mut LayerSq {
        let i = match self.position(name.as_ref()) {
            Ok(i) => i,
            Err(i) => {
                self.entries.insert(i, (name.into(), make()));
                i
            }
        };
        &mut self.entries[i].1
    }

    /// The norms of layer `name`.
    pub fn get(&self, name: &str) -> Option<&LayerSq> {
        self.position(name).ok().map(|i| &self.entries[i].1)
    }

    /// True when layer `name` is present.
    pub fn contains_key(&self, name: &str) -> bool {
        self.position(name).is_ok()
    }

    /// Number of layers.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no layer is reported.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Remove layer `name`; returns its norms.
    pub fn remove(&mut self, name: &str) -> Option<LayerSq> {
        self.position(name).ok().map(|i| self.entries.remove(i).1)
    }

    /// Remove every layer.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// (name, norms) in name order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            inner: self.entries.iter(),
        }
    }

    /// The shared names with their norms, in name order (clone a name to keep it cheaply).
    pub fn entries(&self) -> &[(LayerName, LayerSq)] {
        &self.entries[..]
    }

    /// Names in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(n, _)| n.as_ref())
    }

    /// Norms in name order.
    pub fn values(&self) -> impl Iterator<Item = &LayerSq> {
        self.entries.iter().map(|(_, l)| l)
    }

    /// Norms in name order, mutable.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut LayerSq> {
        self.entries.iter_mut().map(|(_, l)| l)
    }
}

/// Iterator over a [`LayerMap`]'s (name, norms), in name order.
pub struct Iter<'a> {
    inner: std::slice::Iter<'a, (LayerName, LayerSq)>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a LayerSq);

    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next().map(|(n, l)| (n.as_ref(), l))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a LayerMap {
    type Item = (&'a str, &'a LayerSq);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl std::ops::Index<&str> for LayerMap {
    type Output = LayerSq;

    /// The norms of a layer that must be present (panics otherwise, as a map's index does).
    fn index(&self, name: &str) -> &LayerSq {
        match self.get(name) {
            Some(l) => l,
            None => panic!("no layer named {name:?}"),
        }
    }
}

impl<K: Into<LayerName>> FromIterator<(K, LayerSq)> for LayerMap {
    fn from_iter<I: IntoIterator<Item = (K, LayerSq)>>(iter: I) -> Self {
        let mut m = LayerMap::new();
        m.extend(iter);
        m
    }
}

impl<K: Into<LayerName>> Extend<(K, LayerSq)> for LayerMap {
    fn extend<I: IntoIterator<Item = (K, LayerSq)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.insert(k, v);
        }
    }
}

impl Serialize for LayerMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for LayerMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, LayerSq>::deserialize(d)?;
        Ok(map.into_iter().map(|(k, v)| (intern(&k), v)).collect())
    }
}

/// Names kept per thread by [`intern`] (a run with more layers than this still reads
/// correctly; names past it are shared less).
const INTERNED_PER_THREAD: usize = 1 << 16;

/// One thread's names: by text, and in the order first seen with a cursor, since a run
/// reports its layers in the same order at every step (the usual look-up is one comparison
/// with the name after the previous one).
#[derive(Default)]
struct Names {
    by_text: HashMap<LayerName, usize>,
    in_order: Vec<LayerName>,
    next: usize,
}

thread_local! {
    static NAMES: RefCell<Names> = RefCell::new(Names::default());
}

/// The shared string for layer `name`: the same allocation for every call on this thread
/// (readers parse on several threads; each keeps its own table, so no lock and no shared
/// reference count is touched while parsing).
pub fn intern(name: &str) -> LayerName {
    NAMES.with(|names| {
        let mut names = names.borrow_mut();
        let names = &mut *names;
        let at = match names.in_order.get(names.next) {
            Some(n) if n.as_ref() == name => Some(names.next),
            _ => names.by_text.get(name).copied(),
        };
        if let Some(i) = at {
            names.next = if i + 1 == names.in_order.len() {
                0
            } else {
                i + 1
            };
            return names.in_order[i].clone();
        }
        let shared: LayerName = Arc::from(name);
        if names.in_order.len() < INTERNED_PER_THREAD {
            names.by_text.insert(shared.clone(), names.in_order.len());
            names.in_order.push(shared.clone());
            names.next = 0;
        }
        shared
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sq(x: f64) -> LayerSq {
        LayerSq {
            sq_small: x,
            sq_big: x / 2.0,
        }
    }

    /// Inserts in any order, replacements and look-ups behave as a `BTreeMap`'s, and the
    /// JSON is the same.
    #[test]
    fn behaves_as_an_ordered_map() {
        let names = ["b", "a.1", "c", "a", "b", "", "a.10", "c"];
        let (mut m, mut oracle) = (LayerMap::new(), BTreeMap::new());
        for (i, n) in names.iter().enumerate() {
            let x = sq(i as f64);
            assert_eq!(m.insert(intern(n), x), oracle.insert(n.to_string(), x));
            assert_eq!(m.len(), oracle.len());
        }
        let pairs: Vec<(String, LayerSq)> = m.iter().map(|(n, l)| (n.to_string(), *l)).collect();
        let want: Vec<(String, LayerSq)> = oracle.clone().into_iter().collect();
        assert_eq!(pairs, want);
        assert_eq!(m["c"], oracle["c"]);
        assert_eq!(m.get("zz"), None);
        assert!(m.contains_key("a.10") && !m.contains_key("a.2"));
        let json = serde_json::to_string(&m).expect("json");
        assert_eq!(json, serde_json::to_string(&oracle).expect("json"));
        let back: LayerMap = serde_json::from_str(&json).expect("read back");
        assert_eq!(back, m);
        *m.get_or_insert_with("d", || sq(9.0)) = sq(10.0);
        m.get_or_insert_with("a", || sq(-1.0)).sq_small += 1.0;
        assert_eq!(m["d"], sq(10.0));
        assert_eq!(m["a"].sq_small, oracle["a"].sq_small + 1.0);
        assert_eq!(
            m.keys().collect::<Vec<_>>(),
            ["", "a", "a.1", "a.10", "b", "c", "d"]
        );
    }

    /// One allocation per name and thread, whatever the order of look-ups.
    #[test]
    fn interned_names_share_their_string() {
        let (a, b) = (intern("layer.7"), intern("layer.7"));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(&*a, "layer.7");
        let names = ["x.0", "x.1", "x.2", "x.3"];
        let first: Vec<LayerName> = names.iter().map(|n| intern(n)).collect();
        for round in 0..50usize {
            // In order, then shuffled, then repeated.
            let k = (round * 7 + round / 3) % names.len();
            for j in 0..names.len() {
                let i = if round % 2 == 0 {
                    j
                } else {
                    (k + j * 3) % names.len()
                };
                let again = intern(names[i]);
                assert!(Arc::ptr_eq(&again, &first[i]));
                assert_eq!(&*again, names[i]);
            }
        }
    }
}
