//! The fixture world: a scenario's JSON state and the one implementation of what a declared
//! tool does to it ([`ToolEffect`] read / write / append / find on dotted paths, behind the
//! tool's `when` conditions), and, for a scenario with a world server, the connection its
//! tools are forwarded through ([`server`]).
//!
//! Every tool call — from the harness's own tool loop (`demo`, `openai`, `anthropic`) or
//! through a run's MCP door — is executed here, so a tool behaves the same whichever agent
//! calls it. This module never scores.

pub mod server;

use std::cmp::Ordering;

use serde_json::{Map, Value};
use windtunnel_model::{ServerCall, ToolCondition, ToolEffect, ToolSpec, WorldCheck};

use server::{Called, Server};

/// A scenario's mutable world state for one run.
#[derive(Debug, Default)]
pub struct World {
    /// The built-in JSON world.
    state: Value,
    /// The run's world server, when the scenario has one.
    server: Option<Server>,
    /// The server's `state` call, and its last answer.
    state_call: Option<ServerCall>,
    snapshot: Option<Value>,
    /// A server call happened since the snapshot was taken.
    stale: bool,
    /// What checks read: the JSON world with the server's snapshot over it.
    view: Option<Value>,
    /// What [`World::take_state`] moved out, for [`World::restore`].
    taken: Taken,
    /// A tool wrote to (or appended to) the JSON world: its state may differ from the one
    /// it started with.
    written: bool,
}

/// What [`World::take_state`] moved out.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum Taken {
    #[default]
    Nothing,
    View,
    State,
}

impl World {
    pub fn new(state: Option<&Value>) -> Self {
        World::starting_at(state.cloned().unwrap_or(Value::Null))
    }

    /// A world whose JSON state starts as `state` (owned: a lane hands back the last run's
    /// untouched copy instead of cloning the scenario's again).
    pub fn starting_at(state: Value) -> Self {
        World {
            state,
            ..World::default()
        }
    }

    /// Has a tool written to the JSON world? Until one has, its state is still the one it
    /// started with (a world server's state is not the JSON world's, and not counted).
    pub fn written(&self) -> bool {
        self.written
    }

    /// Adds the run's world server; `state_call` is what [`World::refresh`] reads.
    pub fn attach(&mut self, server: Server, state_call: Option<ServerCall>) {
        self.server = Some(server);
        self.state_call = state_call;
        self.snapshot = None;
        self.view = None;
        self.stale = true;
    }

    /// Takes the world server back (to stop it, or for its lane to keep).
    pub fn detach(&mut self) -> Option<Server> {
        self.server.take()
    }

    /// The world server, while attached.
    pub fn server_mut(&mut self) -> Option<&mut Server> {
        self.server.as_mut()
    }

    /// Why the world server broke, if it did.
    pub fn server_broken(&self) -> Option<(String, String)> {
        let s = self.server.as_ref()?;
        s.broken().map(|why| (s.name().to_owned(), why.to_owned()))
    }

    /// Reads the server's state again (its `state` call). Without a server or a state
    /// call there is nothing to read.
    pub fn refresh(&mut self) -> Result<(), String> {
        let (Some(server), Some(call)) = (self.server.as_mut(), self.state_call.as_ref()) else {
            return Ok(());
        };
        let snapshot = server.call_own("state", call)?;
        self.snapshot = Some(snapshot);
        self.stale = false;
        self.rebuild_view();
        Ok(())
    }

    fn rebuild_view(&mut self) {
        self.view = self.snapshot.as_ref().map(|snap| match (&self.state, snap) {
            (Value::Null, _) => snap.clone(),
            (Value::Object(mine), Value::Object(theirs)) => {
                let mut both = mine.clone();
                both.extend(theirs.iter().map(|(k, v)| (k.clone(), v.clone())));
                Value::Object(both)
            }
            // A server state that is not an object cannot sit beside an object world: the
            // server's wins, as the state checks are written against it.
            _ => snap.clone(),
        });
    }

    /// What checks read: the JSON world, with the server's last snapshot over it.
    pub fn state(&self) -> &Value {
        self.view.as_ref().unwrap_or(&self.state)
    }

    /// [`World::state`], moved out: for the end of a run, where only a hook's converse turn
    /// may still act on the world, and [`World::restore`]s it first.
    pub fn take_state(&mut self) -> Value {
        match self.view.take() {
            Some(v) => {
                self.taken = Taken::View;
                v
            }
            None => {
                self.taken = Taken::State;
                self.state.take()
            }
        }
    }

    /// Puts back what [`World::take_state`] moved out, as `copy` makes it (nothing if
    /// nothing was taken).
    pub fn restore(&mut self, copy: impl FnOnce() -> Value) {
        match std::mem::take(&mut self.taken) {
            Taken::Nothing => {}
            Taken::View => self.view = Some(copy()),
            Taken::State => self.state = copy(),
        }
    }

    /// The value at a dotted path (`orders.1234.status`; array elements by index).
    pub fn get(&self, path: &str) -> Option<&Value> {
        lookup(self.state(), path)
    }

    /// Runs `tool` with `args` against the world and returns the tool's result.
    pub fn execute(&mut self, tool: &ToolSpec, args: &Value) -> Result<Value, String> {
        if !tool.when.is_empty() {
            if self.stale && self.server.is_some() {
                self.refresh()?;
            }
            for c in &tool.when {
                self.condition(c, args)?;
            }
        }
        let result = match &tool.effect {
            ToolEffect::Server { .. } => {
                let Some(server) = self.server.as_mut() else {
                    return Err("the world server is not running".into());
                };
                self.stale = true;
                return match server.call(&tool.name, args) {
                    Ok(Called::Done(v)) => Ok(v),
                    Ok(Called::Failed(why)) => Err(why),
                    Err(why) => Err(format!("world server `{}` failed: {why}", server.name())),
                };
            }
            ToolEffect::Read { path, key_arg } => {
                let path = extend(path, key_arg.as_deref(), args)?;
                self.get(&path)
                    .cloned()
                    .ok_or_else(|| format!("nothing at `{path}`"))
            }
            ToolEffect::Find { path, by } => {
                let target = self
                    .get(path)
                    .ok_or_else(|| format!("nothing at `{path}`"))?;
                let wanted: Vec<(&str, &Value)> = by
                    .iter()
                    .map(|(field, arg)| Ok((field.as_str(), arg_value(args, arg)?)))
                    .collect::<Result<_, String>>()?;
                let items: Box<dyn Iterator<Item = &Value>> = match target {
                    Value::Array(a) => Box::new(a.iter()),
                    Value::Object(m) => Box::new(m.values()),
                    _ => return Err(format!("`{path}` is neither an array nor an object")),
                };
                Ok(Value::Array(
                    items
                        .filter(|item| {
                            wanted.iter().all(|(field, want)| {
                                lookup(item, field).is_some_and(|v| loose_eq(v, want))
                            })
                        })
                        .cloned()
                        .collect(),
                ))
            }
            ToolEffect::Write {
                path,
                key_arg,
                value_arg,
                value,
            } => {
                let path = extend(path, key_arg.as_deref(), args)?;
                let new = match (value, value_arg) {
                    (Some(v), _) => v.clone(),
                    (None, Some(arg)) => arg_value(args, arg)?.clone(),
                    (None, None) => args.clone(),
                };
                self.written = true;
                let slot = slot_mut(&mut self.state, &path)?;
                *slot = new.clone();
                Ok(new)
            }
            ToolEffect::Append { path, value_arg } => {
                let item = match value_arg {
                    Some(arg) => arg_value(args, arg)?.clone(),
                    None => args.clone(),
                };
                self.written = true;
                let target = lookup_mut(&mut self.state, path)
                    .ok_or_else(|| format!("nothing at `{path}`"))?;
                let array = target
                    .as_array_mut()
                    .ok_or_else(|| format!("`{path}` is not an array"))?;
                array.push(item);
                Ok(Value::from(array.len()))
            }
            _ => Err("this wt cannot run this tool effect".into()),
        };
        if self.snapshot.is_some() {
            self.rebuild_view();
        }
        result
    }

    /// Does the tool condition `c` hold for a call with `args`? `Err` is its `error`.
    fn condition(&self, c: &ToolCondition, args: &Value) -> Result<(), String> {
        let found = match (&c.path, &c.arg) {
            (Some(path), _) => self.get(&fill(path, args)?),
            (None, Some(arg)) => lookup(args, arg),
            (None, None) => None,
        };
        let holds = c.exists.is_none_or(|e| e == found.is_some())
            && c
                .equals
                .as_ref()
                .is_none_or(|want| found.is_some_and(|v| loose_eq(v, want)));
        if holds { Ok(()) } else { Err(c.error.clone()) }
    }

    /// Does `check` hold? `Err` says why not, in words a person can act on.
    pub fn check(&self, check: &WorldCheck) -> Result<(), String> {
        check_state(self.state(), check)
    }
}

/// Does `check` hold on `state` (a world's state, read where it lies)? See [`World::check`].
///
/// Every condition of the check must hold. A value that is absent, or of a kind a condition
/// does not apply to (`matches` on a number, `gt` on a string, `contains` on an object),
/// fails that condition: a check never passes on what it could not read.
pub fn check_state(state: &Value, check: &WorldCheck) -> Result<(), String> {
    let found = lookup(state, &check.path);
    let at = shown_path(&check.path);
    if let Some(exists) = check.exists
        && exists != found.is_some()
    {
        return Err(if exists {
            format!("{at} should exist but is absent")
        } else {
            format!(
                "{at} should be absent but is {}",
                show(found.unwrap_or(&Value::Null))
            )
        });
    }
    let absent = |expected: String| format!("{at} is absent, expected {expected}");
    if let Some(expected) = &check.equals {
        match found {
            Some(v) if loose_eq(v, expected) => {}
            Some(v) => {
                return Err(format!("{at} is {}, expected {}", show(v), show(expected)));
            }
            None => return Err(absent(show(expected))),
        }
    }
    if let Some(needle) = &check.contains {
        let what = format!("it to contain {}", show(needle));
        match (found, needle) {
            (None, _) => return Err(absent(what)),
            (Some(Value::String(s)), Value::String(n)) if s.contains(n.as_str()) => {}
            (Some(Value::Array(a)), n) if a.iter().any(|v| loose_eq(v, n)) => {}
            (Some(v @ (Value::String(_) | Value::Array(_))), _) => {
                return Err(format!("{at} is {}, expected {what}", show(v)));
            }
            (Some(v), _) => {
                return Err(format!(
                    "{at} is {}, neither a string nor an array, expected {what}",
                    show(v)
                ));
            }
        }
    }
    if let Some(pattern) = &check.matches {
        let re = regex(pattern)?;
        let what = format!("a string that matches /{}/", crate::term::sanitize(pattern));
        match found {
            None => return Err(absent(what)),
            Some(Value::String(s)) if re.is_match(s) => {}
            Some(v) => return Err(format!("{at} is {}, expected {what}", show(v))),
        }
    }
    let bounds = [
        ("greater than", &check.gt, [Ordering::Greater].as_slice()),
        ("at least", &check.ge, &[Ordering::Greater, Ordering::Equal]),
        ("less than", &check.lt, &[Ordering::Less]),
        ("at most", &check.le, &[Ordering::Less, Ordering::Equal]),
    ];
    for (words, bound, holds) in bounds {
        let Some(bound) = bound else { continue };
        let what = format!("a number {words} {bound}");
        match found {
            None => return Err(absent(what)),
            Some(Value::Number(n)) if compare(n, bound).is_some_and(|o| holds.contains(&o)) => {}
            Some(v) => return Err(format!("{at} is {}, expected {what}", show(v))),
        }
    }
    Ok(())
}

/// A path as messages name it: `` `a.b` ``, or the whole value for the empty path.
fn shown_path(path: &str) -> String {
    if segments(path).next().is_none() {
        "the whole value".to_owned()
    } else {
        format!("`{}`", crate::term::sanitize(path))
    }
}

/// `pattern` compiled, or why it is not a regular expression, on one line.
pub fn regex(pattern: &str) -> Result<regex::Regex, String> {
    regex::Regex::new(pattern).map_err(|e| {
        // The crate's syntax errors draw the pattern over several lines; the last one says
        // what is wrong.
        let text = e.to_string();
        let why = text
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("error: "))
            .unwrap_or_else(|| text.lines().last().unwrap_or("invalid"));
        format!(
            "{:?} is not a regular expression: {}",
            pattern,
            crate::term::sanitize(why)
        )
    })
}

/// Two JSON numbers in order: integers exactly, anything else as `f64`.
fn compare(a: &serde_json::Number, b: &serde_json::Number) -> Option<Ordering> {
    let int = |n: &serde_json::Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    match (int(a), int(b)) {
        (Some(x), Some(y)) => Some(x.cmp(&y)),
        _ => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

/// Numbers compare by value (`1` equals `1.0`); everything else structurally.
fn loose_eq(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) if a.is_number() && b.is_number() => x == y,
        _ => a == b,
    }
}

fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 80 {
        format!("{}…", s.chars().take(80).collect::<String>())
    } else {
        s
    }
}

fn arg_value<'a>(args: &'a Value, name: &str) -> Result<&'a Value, String> {
    args.get(name)
        .ok_or_else(|| format!("missing argument `{name}`"))
}

/// `path` with each `{name}` replaced by the value of the argument `name`.
fn fill(path: &str, args: &Value) -> Result<String, String> {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            out.push_str(&rest[open..]);
            return Ok(out);
        };
        let name = &rest[open + 1..open + close];
        out.push_str(&key_text(name, arg_value(args, name)?)?);
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn key_text(arg: &str, v: &Value) -> Result<String, String> {
    let key = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => return Err(format!("argument `{arg}` must be a string, got {other}")),
    };
    if key.is_empty() || key.contains('.') {
        return Err(format!("argument `{arg}` is not a valid key: {key:?}"));
    }
    Ok(key)
}

fn extend(path: &str, key_arg: Option<&str>, args: &Value) -> Result<String, String> {
    let Some(arg) = key_arg else {
        return Ok(path.to_owned());
    };
    let key = key_text(arg, arg_value(args, arg)?)?;
    Ok(if path.is_empty() {
        key
    } else {
        format!("{path}.{key}")
    })
}

fn segments(path: &str) -> impl Iterator<Item = &str> {
    path.split('.').filter(|s| !s.is_empty())
}

/// The value at a dotted path of `root`.
pub fn lookup<'a>(root: &'a Value, path: &str) -> Option<&'a Value> {
    segments(path).try_fold(root, |v, seg| match v {
        Value::Object(m) => m.get(seg),
        Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

fn lookup_mut<'a>(root: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    segments(path).try_fold(root, |v, seg| match v {
        Value::Object(m) => m.get_mut(seg),
        Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
        _ => None,
    })
}

/// The slot at `path`, creating the last object key if it is missing (the parent must exist).
fn slot_mut<'a>(root: &'a mut Value, path: &str) -> Result<&'a mut Value, String> {
    let (parent, last) = match path.rsplit_once('.') {
        Some((p, l)) => (p, l),
        None => ("", path),
    };
    let parent_value = lookup_mut(root, parent).ok_or_else(|| format!("nothing at `{parent}`"))?;
    match parent_value {
        Value::Object(m) => Ok(m.entry(last.to_owned()).or_insert(Value::Null)),
        Value::Array(a) => last
            .parse::<usize>()
            .ok()
            .and_then(|i| a.get_mut(i))
            .ok_or_else(|| format!("no element `{last}` in `{parent}`")),
        Value::Null if parent.is_empty() => {
            *parent_value = Value::Object(Map::new());
            match parent_value {
                Value::Object(m) => Ok(m.entry(last.to_owned()).or_insert(Value::Null)),
                _ => unreachable!("just set to an object"),
            }
        }
        _ => Err(format!("`{parent}` is not an object")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(effect: ToolEffect) -> ToolSpec {
        let mut spec = ToolSpec::new("t", effect);
        spec.parameters = json!({});
        spec
    }

    fn world() -> World {
        World::new(Some(
            &json!({"orders": {"1": {"status": "new"}}, "log": []}),
        ))
    }

    #[test]
    fn read_with_key() {
        let mut w = world();
        let t = tool(ToolEffect::Read {
            path: "orders".into(),
            key_arg: Some("id".into()),
        });
        assert_eq!(
            w.execute(&t, &json!({"id": "1"})).unwrap(),
            json!({"status": "new"})
        );
        assert_eq!(
            w.execute(&t, &json!({"id": 1})).unwrap(),
            json!({"status": "new"})
        );
        assert!(
            w.execute(&t, &json!({"id": "2"}))
                .unwrap_err()
                .contains("orders.2")
        );
        assert!(
            w.execute(&t, &json!({}))
                .unwrap_err()
                .contains("missing argument")
        );
    }

    #[test]
    fn write_and_append() {
        let mut w = world();
        let t = tool(ToolEffect::Write {
            path: "orders.1.status".into(),
            key_arg: None,
            value_arg: None,
            value: Some(json!("refunded")),
        });
        w.execute(&t, &json!({})).unwrap();
        assert_eq!(w.get("orders.1.status"), Some(&json!("refunded")));
        let a = tool(ToolEffect::Append {
            path: "log".into(),
            value_arg: Some("msg".into()),
        });
        assert_eq!(w.execute(&a, &json!({"msg": "hi"})).unwrap(), json!(1));
        assert_eq!(w.get("log.0"), Some(&json!("hi")));
        let bad = tool(ToolEffect::Append {
            path: "orders".into(),
            value_arg: None,
        });
        assert!(
            w.execute(&bad, &json!({}))
                .unwrap_err()
                .contains("not an array")
        );
    }

    #[test]
    fn when_conditions_gate_a_call_on_the_world_and_the_arguments() {
        let mut w = World::new(Some(&json!({
            "orders": {"1": {"status": "delivered"}, "2": {"status": "shipped"}}
        })));
        let mut refund = tool(ToolEffect::Write {
            path: "orders".into(),
            key_arg: Some("id".into()),
            value_arg: None,
            value: Some(json!({"status": "refunded"})),
        });
        let mut delivered = ToolCondition::default();
        delivered.path = Some("orders.{id}.status".into());
        delivered.equals = Some(json!("delivered"));
        delivered.error = "only a delivered order can be refunded".into();
        let mut small = ToolCondition::default();
        small.arg = Some("amount".into());
        small.exists = Some(false);
        small.error = "refunds are for the whole order".into();
        refund.when = vec![delivered, small];
        assert_eq!(
            w.execute(&refund, &json!({"id": "2"})).unwrap_err(),
            "only a delivered order can be refunded"
        );
        assert_eq!(w.get("orders.2.status"), Some(&json!("shipped")));
        assert_eq!(
            w.execute(&refund, &json!({"id": "1", "amount": 5})).unwrap_err(),
            "refunds are for the whole order"
        );
        assert!(
            w.execute(&refund, &json!({}))
                .unwrap_err()
                .contains("missing argument `id`")
        );
        w.execute(&refund, &json!({"id": "1"})).unwrap();
        assert_eq!(w.get("orders.1.status"), Some(&json!("refunded")));
        // The condition reads the world as it is now: refunded is no longer delivered.
        assert!(w.execute(&refund, &json!({"id": "1"})).is_err());
    }

    #[test]
    fn find_selects_elements_by_field_values() {
        let mut w = World::new(Some(&json!({
            "orders": [
                {"id": 1, "customer": "ann", "status": "shipped"},
                {"id": 2, "customer": "bob", "status": "shipped"},
                {"id": 3, "customer": "ann", "status": "delivered"}
            ],
            "by_id": {"a": {"customer": "ann"}, "b": {"customer": "bob"}}
        })));
        let by = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(f, a)| ((*f).to_owned(), (*a).to_owned()))
                .collect()
        };
        let find = tool(ToolEffect::Find {
            path: "orders".into(),
            by: by(&[("customer", "who"), ("status", "state")]),
        });
        assert_eq!(
            w.execute(&find, &json!({"who": "ann", "state": "delivered"}))
                .unwrap(),
            json!([{"id": 3, "customer": "ann", "status": "delivered"}])
        );
        assert_eq!(
            w.execute(&find, &json!({"who": "cy", "state": "shipped"}))
                .unwrap(),
            json!([])
        );
        assert!(
            w.execute(&find, &json!({"who": "ann"}))
                .unwrap_err()
                .contains("missing argument `state`")
        );
        let in_object = tool(ToolEffect::Find {
            path: "by_id".into(),
            by: by(&[("customer", "who")]),
        });
        assert_eq!(
            w.execute(&in_object, &json!({"who": "bob"})).unwrap(),
            json!([{"customer": "bob"}])
        );
        // Numbers match by value.
        let by_number = tool(ToolEffect::Find {
            path: "orders".into(),
            by: by(&[("id", "n")]),
        });
        assert_eq!(
            w.execute(&by_number, &json!({"n": 2.0})).unwrap()[0]["customer"],
            json!("bob")
        );
    }

    #[test]
    fn checks() {
        let w = world();
        let eq = |path: &str, v| {
            let mut c = WorldCheck::default();
            c.path = path.into();
            c.equals = Some(v);
            c
        };
        assert!(w.check(&eq("orders.1.status", json!("new"))).is_ok());
        let err = w.check(&eq("orders.1.status", json!("done"))).unwrap_err();
        assert!(err.contains("\"new\"") && err.contains("\"done\""), "{err}");
        let mut absent = WorldCheck::default();
        absent.path = "log.0".into();
        absent.exists = Some(false);
        assert!(w.check(&absent).is_ok());
    }

    #[test]
    fn bounds_compare_integers_exactly_and_refuse_what_is_not_a_number() {
        let state = json!({"big": u64::MAX, "near": 9_007_199_254_740_993_i64, "f": 2.5, "s": "3"});
        let bound = |path: &str, gt: Value| {
            let mut c = WorldCheck::default();
            c.path = path.into();
            c.gt = gt.as_number().cloned();
            check_state(&state, &c)
        };
        assert!(bound("big", json!(u64::MAX - 1)).is_ok());
        assert!(bound("big", json!(u64::MAX)).is_err());
        // Past 2^53 an f64 cannot tell these apart; integers are compared as integers.
        assert!(bound("near", json!(9_007_199_254_740_992_i64)).is_ok());
        assert!(bound("f", json!(2)).is_ok());
        assert!(bound("f", json!(2.5)).is_err());
        let e = bound("s", json!(1)).unwrap_err();
        assert_eq!(e, "`s` is \"3\", expected a number greater than 1");
        assert!(bound("nothing", json!(1)).unwrap_err().contains("is absent"));
    }
}
