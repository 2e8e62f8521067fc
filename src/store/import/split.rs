//! A record's text split where its bulk is, without a JSON tree of the whole: everything but
//! the runs as a tree (the plan, the hosts, the summaries: small), each run as its own text
//! (borrowed from the record's, not copied); then a run split the same way, its fields as
//! a tree and its samples as text, read one sample at a time. What import holds of a record
//! is so its text and the typed runs made from it, never a tree of its samples (a tree of
//! JSON numbers takes about ten times their text).

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// A record: its tree with every variant's `runs` empty, and each variant's runs as text
/// (by the variant's index in `variants`).
pub(super) struct Split<'a> {
    pub(super) skeleton: Value,
    pub(super) runs: Vec<Vec<&'a RawValue>>,
}

/// Splits a record's text. A syntax error is serde_json's (line and column in the text);
/// whatever the shape, the split succeeds as long as the text is JSON (a shape that is
/// not a record's is left whole in the skeleton, for the schema to name).
pub(super) fn record(text: &str) -> Result<Split<'_>, serde_json::Error> {
    let mut runs = Vec::new();
    let mut de = serde_json::Deserializer::from_str(text);
    let skeleton = Top { runs: &mut runs }.deserialize(&mut de)?;
    de.end()?;
    Ok(Split { skeleton, runs })
}

/// A run: its fields but `samples` as a tree, and its samples' text; `Err` holds a run
/// that is not an object, whole, for the schema to name.
pub(super) fn run(raw: &RawValue) -> Result<(Map<String, Value>, Option<&RawValue>), Value> {
    match serde_json::from_str::<RunParts<'_>>(raw.get()) {
        Ok(RunParts::Object(fields, samples)) => Ok((fields, samples)),
        Ok(RunParts::Other(v)) => Err(v),
        // Not reached for text that parsed as a record; kept whole all the same.
        Err(_) => Err(serde_json::from_str(raw.get()).unwrap_or(Value::Null)),
    }
}

/// Reads the samples' text one sample at a time, each as a small tree handed to `each`
/// with its index; `each`'s error stops the reading and is returned. `Err(None)` when the
/// samples are not an array (the schema names it).
pub(super) fn each_sample<E>(
    raw: &RawValue,
    each: &mut dyn FnMut(usize, Value) -> Result<(), E>,
) -> Result<(), Option<E>> {
    let mut failed = None;
    let mut de = serde_json::Deserializer::from_str(raw.get());
    let read = de.deserialize_seq(Samples {
        each,
        failed: &mut failed,
    });
    match (read, failed) {
        (_, Some(e)) => Err(Some(e)),
        (Ok(()), None) => Ok(()),
        (Err(_), None) => Err(None),
    }
}

/// The top level: a map whose `variants` are read by [`Variants`]; anything else whole.
struct Top<'r, 'a> {
    runs: &'r mut Vec<Vec<&'a RawValue>>,
}

impl<'de: 'a, 'a> DeserializeSeed<'de> for Top<'_, 'a> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// A [`Visitor`]'s scalars (bool, numbers, strings, null) kept whole as a [`Value`], given
/// to the visitor's own type through `$wrap`: the tree of any JSON value but for the maps
/// it is asked to split, and the "anything else" of `runs` and of a run.
macro_rules! whole_values {
    () => {
        whole_values!(Value, std::convert::identity);
    };
    ($out:ty, $wrap:expr) => {
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<$out, E> {
            Ok($wrap(Value::Bool(v)))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<$out, E> {
            Ok($wrap(Value::from(v)))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<$out, E> {
            Ok($wrap(Value::from(v)))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<$out, E> {
            Ok($wrap(Value::from(v)))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<$out, E> {
            Ok($wrap(Value::String(v.to_string())))
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<$out, E> {
            Ok($wrap(Value::String(v)))
        }
        fn visit_unit<E: de::Error>(self) -> Result<$out, E> {
            Ok($wrap(Value::Null))
        }
        fn visit_none<E: de::Error>(self) -> Result<$out, E> {
            Ok($wrap(Value::Null))
        }
    };
}

/// A sequence read whole.
fn whole_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<Value, A::Error> {
    let mut out = Vec::new();
    while let Some(v) = seq.next_element::<Value>()? {
        out.push(v);
    }
    Ok(Value::Array(out))
}

impl<'de: 'a, 'a> Visitor<'de> for Top<'_, 'a> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    whole_values!();
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        whole_seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            let v = if k == "variants" {
                map.next_value_seed(Variants {
                    runs: &mut *self.runs,
                })?
            } else {
                map.next_value::<Value>()?
            };
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

/// `variants`: each an object whose `runs` array is taken as texts; anything else whole.
struct Variants<'r, 'a> {
    runs: &'r mut Vec<Vec<&'a RawValue>>,
}

impl<'de: 'a, 'a> DeserializeSeed<'de> for Variants<'_, 'a> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de: 'a, 'a> Visitor<'de> for Variants<'_, 'a> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the variants")
    }
    whole_values!();
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        Value::deserialize_map_whole(map)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        loop {
            let mut runs = Vec::new();
            match seq.next_element_seed(Variant { runs: &mut runs })? {
                Some(v) => {
                    out.push(v);
                    self.runs.push(runs);
                }
                None => break,
            }
        }
        Ok(Value::Array(out))
    }
}

/// One variant: its `runs` array as texts (the array left empty in the tree).
struct Variant<'r, 'a> {
    runs: &'r mut Vec<&'a RawValue>,
}

impl<'de: 'a, 'a> DeserializeSeed<'de> for Variant<'_, 'a> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de: 'a, 'a> Visitor<'de> for Variant<'_, 'a> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a variant")
    }
    whole_values!();
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        whole_seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            let v = if k == "runs" {
                match map.next_value::<RunsIn<'a>>()? {
                    RunsIn::Texts(texts) => {
                        *self.runs = texts;
                        Value::Array(Vec::new())
                    }
                    RunsIn::Other(v) => v,
                }
            } else {
                map.next_value::<Value>()?
            };
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

/// A variant's `runs`: an array taken as each run's text, or anything else whole.
enum RunsIn<'a> {
    Texts(Vec<&'a RawValue>),
    Other(Value),
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for RunsIn<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = RunsIn<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("the runs")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RunsIn<'a>, A::Error> {
                let mut out = Vec::new();
                while let Some(r) = seq.next_element::<&'a RawValue>()? {
                    out.push(r);
                }
                Ok(RunsIn::Texts(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RunsIn<'a>, A::Error> {
                Value::deserialize_map_whole(map).map(RunsIn::Other)
            }
            whole_values!(RunsIn<'a>, RunsIn::Other);
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// A run: an object's fields but `samples` as a tree and its samples as text, or anything
/// else whole.
enum RunParts<'a> {
    Object(Map<String, Value>, Option<&'a RawValue>),
    Other(Value),
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for RunParts<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = RunParts<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a run")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RunParts<'a>, A::Error> {
                let mut fields = Map::new();
                let mut samples = None;
                while let Some(k) = map.next_key::<String>()? {
                    if k == "samples" {
                        samples = Some(map.next_value::<&'a RawValue>()?);
                    } else {
                        let v = map.next_value::<Value>()?;
                        fields.insert(k, v);
                    }
                }
                Ok(RunParts::Object(fields, samples))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<RunParts<'a>, A::Error> {
                whole_seq(seq).map(RunParts::Other)
            }
            whole_values!(RunParts<'a>, RunParts::Other);
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// The samples array, read one element at a time.
struct Samples<'f, E> {
    each: &'f mut dyn FnMut(usize, Value) -> Result<(), E>,
    failed: &'f mut Option<E>,
}

impl<'de, E> Visitor<'de> for Samples<'_, E> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of samples")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while let Some(v) = seq.next_element::<Value>()? {
            if let Err(e) = (self.each)(i, v) {
                *self.failed = Some(e);
                return Err(de::Error::custom("stopped"));
            }
            i += 1;
        }
        Ok(())
    }
}

/// A map read whole into a tree (for shapes that are not what a split expects).
trait WholeMap {
    fn deserialize_map_whole<'de, A: MapAccess<'de>>(map: A) -> Result<Value, A::Error>;
}

impl WholeMap for Value {
    fn deserialize_map_whole<'de, A: MapAccess<'de>>(mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            let v = map.next_value::<Value>()?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_splits_into_its_tree_and_its_runs_texts() {
        let text = r#"{"schema_version": 4, "variants": [
            {"name": "glibc", "runs": [{"a": 1, "samples": [{"t": 1}, {"t": 2}]}, {"b": 2}]},
            {"name": "arena2", "runs": []}, 7], "notes": ["x"]}"#;
        let s = record(text).unwrap();
        assert_eq!(
            s.skeleton,
            serde_json::json!({"schema_version": 4, "variants": [
                {"name": "glibc", "runs": []}, {"name": "arena2", "runs": []}, 7],
                "notes": ["x"]})
        );
        // Each variant's runs by its index (what is not a variant has none).
        assert_eq!(s.runs.len(), 3);
        assert!(s.runs[2].is_empty());
        assert_eq!(s.runs[0].len(), 2);
        assert_eq!(s.runs[0][1].get(), r#"{"b": 2}"#);
        let (fields, samples) = run(s.runs[0][0]).unwrap();
        assert_eq!(Value::Object(fields), serde_json::json!({"a": 1}));
        let mut seen = Vec::new();
        each_sample::<()>(samples.unwrap(), &mut |i, v| {
            seen.push((i, v));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            seen,
            [
                (0, serde_json::json!({"t": 1})),
                (1, serde_json::json!({"t": 2}))
            ]
        );
        assert!(run(s.runs[0][1]).unwrap().1.is_none());
        // What is not a record's shape stays whole, for the schema to name.
        let odd = record(r#"{"variants": {"runs": 3}}"#).unwrap();
        assert_eq!(odd.skeleton, serde_json::json!({"variants": {"runs": 3}}));
        let odd = record(r#"[1, {"variants": []}]"#).unwrap();
        assert_eq!(odd.skeleton, serde_json::json!([1, {"variants": []}]));
        assert!(record(r#"{"variants": [{"runs": [1,]}]}"#).is_err());
        assert!(record("{} x").is_err());
        // A sample's error stops the reading and comes back.
        let r = each_sample(
            serde_json::from_str::<&RawValue>("[1, 2, 3]").unwrap(),
            &mut |i, _| if i == 1 { Err("two") } else { Ok(()) },
        );
        assert_eq!(r, Err(Some("two")));
        let r = each_sample::<()>(
            serde_json::from_str::<&RawValue>("{}").unwrap(),
            &mut |_, _| Ok(()),
        );
        assert_eq!(r, Err(None));
    }
}
