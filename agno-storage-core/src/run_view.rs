//! A typed view of a run dict: the fields applications read to build a model's context
//! (status, content, messages with their tool calls, metrics), borrowed from the run's stored
//! text instead of built into a tree of every value.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use serde_json::Value;
use yoke::erased::ErasedArcCart;
use yoke::{Yoke, Yokeable};

use crate::error::{Error, Result};

/// The fields of an agno `RunOutput` (or `TeamRunOutput`) dict that applications read,
/// from [`crate::RunJson::view`] or [`crate::Session::run_views`].
///
/// Text borrows from the run's stored text wherever it holds no escape sequence; numbers
/// and flags are read as they are. Reading a view checks that the whole run is well-formed
/// JSON, skimming every field the view does not hold without building it; a field of
/// another type than agno writes (a `status` that is not a string) is a
/// [`crate::ErrorKind::Serialization`] error for that run, and
/// [`crate::RunJson::to_value`] still reads it. An absent or `null` field is `None`.
#[derive(Debug, Clone, PartialEq, Deserialize, Yokeable)]
#[non_exhaustive]
pub struct RunView<'a> {
    /// `run_id`.
    #[serde(borrow, default, deserialize_with = "text")]
    pub run_id: Option<Cow<'a, str>>,
    /// `parent_run_id`: set on a member's run inside a team or workflow.
    #[serde(borrow, default, deserialize_with = "text")]
    pub parent_run_id: Option<Cow<'a, str>>,
    /// `session_id`.
    #[serde(borrow, default, deserialize_with = "text")]
    pub session_id: Option<Cow<'a, str>>,
    /// `user_id`.
    #[serde(borrow, default, deserialize_with = "text")]
    pub user_id: Option<Cow<'a, str>>,
    /// `agent_id`.
    #[serde(borrow, default, deserialize_with = "text")]
    pub agent_id: Option<Cow<'a, str>>,
    /// `team_id`.
    #[serde(borrow, default, deserialize_with = "text")]
    pub team_id: Option<Cow<'a, str>>,
    /// `workflow_id`.
    #[serde(borrow, default, deserialize_with = "text")]
    pub workflow_id: Option<Cow<'a, str>>,
    /// `status` as agno writes it (`COMPLETED`, `PAUSED`, `ERROR`, ...).
    #[serde(borrow, default, deserialize_with = "text")]
    pub status: Option<Cow<'a, str>>,
    /// `content`: the run's answer.
    #[serde(borrow, default)]
    pub content: Option<Content<'a>>,
    /// `content_type` (`str`, or the name of a structured output's model).
    #[serde(borrow, default, deserialize_with = "text")]
    pub content_type: Option<Cow<'a, str>>,
    /// `model`.
    #[serde(borrow, default, deserialize_with = "text")]
    pub model: Option<Cow<'a, str>>,
    /// `model_provider`.
    #[serde(borrow, default, deserialize_with = "text")]
    pub model_provider: Option<Cow<'a, str>>,
    /// `messages`, in order.
    #[serde(borrow, default)]
    pub messages: Option<Vec<MessageView<'a>>>,
    /// `metrics`.
    #[serde(default)]
    pub metrics: Option<MetricsView>,
    /// `created_at`, epoch seconds.
    #[serde(default)]
    pub created_at: Option<i64>,
}

/// A run's [`RunView`] that owns what it borrows from (the run's text or value), so it can
/// be kept and shared: [`crate::RunJson::shared_view`], [`crate::Session::shared_run_views`].
/// Cloning it is a reference count.
#[derive(Clone)]
pub struct SharedRunView(Arc<Yoke<RunView<'static>, ErasedArcCart>>);

impl SharedRunView {
    /// The view of the run `source` holds (its stored text, or its value).
    pub(crate) fn of<S: ViewSource>(source: Arc<S>) -> Result<Self> {
        let view = Yoke::<RunView<'static>, Arc<S>>::try_attach_to_cart(source, S::view)
            .map_err(|e| Error::serialization("a run's fields", e))?;
        Ok(SharedRunView(Arc::new(view.erase_arc_cart())))
    }

    /// The view.
    pub fn get(&self) -> &RunView<'_> {
        self.0.get()
    }
}

impl fmt::Debug for SharedRunView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.get(), f)
    }
}

/// What a [`SharedRunView`] borrows from: a run's stored text, or its parsed value.
pub(crate) trait ViewSource: Send + Sync + 'static {
    /// The view of this run.
    fn view(&self) -> serde_json::Result<RunView<'_>>;
}

impl ViewSource for String {
    fn view(&self) -> serde_json::Result<RunView<'_>> {
        crate::json::from_str(self)
    }
}

impl ViewSource for Value {
    fn view(&self) -> serde_json::Result<RunView<'_>> {
        crate::json::from_borrowed_value(self)
    }
}

/// One of a run's messages, as agno's `Message.to_dict` writes it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct MessageView<'a> {
    /// `id`.
    #[serde(borrow, default, deserialize_with = "text")]
    pub id: Option<Cow<'a, str>>,
    /// `role`: `system`, `user`, `assistant`, `tool`, ...
    #[serde(borrow, default, deserialize_with = "text")]
    pub role: Option<Cow<'a, str>>,
    /// `content`: text, or a list of parts.
    #[serde(borrow, default)]
    pub content: Option<Content<'a>>,
    /// `name`.
    #[serde(borrow, default, deserialize_with = "text")]
    pub name: Option<Cow<'a, str>>,
    /// `tool_calls` of an assistant message.
    #[serde(borrow, default)]
    pub tool_calls: Option<Vec<ToolCallView<'a>>>,
    /// `tool_call_id` of a tool message: the call it answers.
    #[serde(borrow, default, deserialize_with = "text")]
    pub tool_call_id: Option<Cow<'a, str>>,
    /// `tool_name` of a tool message.
    #[serde(borrow, default, deserialize_with = "text")]
    pub tool_name: Option<Cow<'a, str>>,
    /// `from_history`: the message was replayed from an earlier run.
    #[serde(default)]
    pub from_history: Option<bool>,
    /// `metrics`.
    #[serde(default)]
    pub metrics: Option<MetricsView>,
    /// `created_at`, epoch seconds.
    #[serde(default)]
    pub created_at: Option<i64>,
}

/// One entry of a message's `tool_calls`, in the function-call form agno stores.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct ToolCallView<'a> {
    /// `id`: the id the tool message's `tool_call_id` names.
    #[serde(borrow, default, deserialize_with = "text")]
    pub id: Option<Cow<'a, str>>,
    /// `type` (`function`).
    #[serde(borrow, default, deserialize_with = "text", rename = "type")]
    pub kind: Option<Cow<'a, str>>,
    /// `function`: the name and arguments.
    #[serde(borrow, default)]
    pub function: Option<FunctionCallView<'a>>,
}

/// A tool call's `function`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct FunctionCallView<'a> {
    /// `name`.
    #[serde(borrow, default, deserialize_with = "text")]
    pub name: Option<Cow<'a, str>>,
    /// `arguments`: JSON text as the model wrote it (or, rarely, an object).
    #[serde(borrow, default)]
    pub arguments: Option<Content<'a>>,
}

/// The token counts and timings of agno's `RunMetrics` and `MessageMetrics` (agno leaves
/// zero counts out; they read as `None`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct MetricsView {
    /// `input_tokens`.
    pub input_tokens: Option<i64>,
    /// `output_tokens`.
    pub output_tokens: Option<i64>,
    /// `total_tokens`.
    pub total_tokens: Option<i64>,
    /// `cache_read_tokens`.
    pub cache_read_tokens: Option<i64>,
    /// `cache_write_tokens`.
    pub cache_write_tokens: Option<i64>,
    /// `reasoning_tokens`.
    pub reasoning_tokens: Option<i64>,
    /// `cost`.
    pub cost: Option<f64>,
    /// `duration`, seconds.
    pub duration: Option<f64>,
    /// `time_to_first_token`, seconds.
    pub time_to_first_token: Option<f64>,
}

/// A `content` (or a tool call's `arguments`): text, borrowed where it can be, or any other
/// JSON value (a list of parts, a structured output), parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum Content<'a> {
    /// A string.
    Text(Cow<'a, str>),
    /// Any other JSON value.
    Json(Value),
}

impl Content<'_> {
    /// The text, when the content is a string.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Content::Text(text) => Some(text),
            Content::Json(_) => None,
        }
    }

    /// The content as a JSON value (a string becomes a JSON string).
    pub fn to_value(&self) -> Value {
        match self {
            Content::Text(text) => Value::String(text.as_ref().to_owned()),
            Content::Json(value) => value.clone(),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ContentVisitor;
        impl<'de> Visitor<'de> for ContentVisitor {
            type Value = Content<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Content<'de>, E> {
                Ok(Content::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Content<'de>, E> {
                Ok(Content::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Content<'de>, E> {
                Ok(Content::Text(Cow::Owned(v)))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Content<'de>, E> {
                Ok(Content::Json(v.into()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Content<'de>, E> {
                Ok(Content::Json(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Content<'de>, E> {
                Ok(Content::Json(v.into()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Content<'de>, E> {
                Ok(Content::Json(v.into()))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Content<'de>, A::Error> {
                Value::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(Content::Json)
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Content<'de>, A::Error> {
                Value::deserialize(de::value::MapAccessDeserializer::new(map)).map(Content::Json)
            }
        }
        deserializer.deserialize_any(ContentVisitor)
    }
}

/// A string field, borrowed where the text holds no escape sequence (serde's own
/// `Option<Cow<str>>` always copies).
fn text<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'a, str>>, D::Error> {
    struct Text<'a>(Cow<'a, str>);
    impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct TextVisitor;
            impl<'de> Visitor<'de> for TextVisitor {
                type Value = Text<'de>;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a string")
                }
                fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'de>, E> {
                    Ok(Text(Cow::Borrowed(v)))
                }
                fn visit_str<E>(self, v: &str) -> Result<Text<'de>, E> {
                    Ok(Text(Cow::Owned(v.to_owned())))
                }
                fn visit_string<E>(self, v: String) -> Result<Text<'de>, E> {
                    Ok(Text(Cow::Owned(v)))
                }
            }
            d.deserialize_str(TextVisitor)
        }
    }
    Ok(Option::<Text<'a>>::deserialize(d)?.map(|t| t.0))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::RunJson;

    fn run() -> Value {
        json!({
            "run_id": "r1", "agent_id": "travel", "session_id": "s1", "user_id": "u1",
            "content": "Book the \"easyJet\" one", "content_type": "str", "model": "gpt-4o",
            "model_provider": "OpenAI", "status": "COMPLETED", "created_at": 1_700_000_000,
            "session_state": {"deep": [[[{"a": 1}]]]},
            "metrics": {"input_tokens": 8900, "output_tokens": 420, "total_tokens": 9320,
                        "time_to_first_token": 0.81, "duration": 6.42},
            "messages": [
                {"id": "m1", "role": "user", "content": "Lisbon?", "from_history": false,
                 "created_at": 1_700_000_001},
                {"id": "m2", "role": "assistant", "content": null,
                 "tool_calls": [{"id": "c1", "type": "function",
                                 "function": {"name": "search", "arguments": "{\"city\": \"LIS\"}"}}],
                 "metrics": {"input_tokens": 900, "output_tokens": 40, "total_tokens": 940}},
                {"id": "m3", "role": "tool", "content": [{"type": "text", "text": "ok"}],
                 "tool_call_id": "c1", "tool_name": "search", "tool_args": {"city": "LIS"}}
            ],
            "tools": [{"tool_call_id": "c1", "result": "{}"}]
        })
    }

    /// The view holds what the dict holds, whether the run is stored text or a value, and
    /// text without escapes is borrowed from the stored text.
    #[test]
    fn the_view_reads_what_the_dict_holds() {
        let value = run();
        let text = RunJson::from_stored_text(value.to_string()).expect("an object");
        let parsed = RunJson::from(value.clone());
        for run in [&text, &parsed] {
            let view = run.view().expect("reads");
            assert_eq!(view.run_id.as_deref(), Some("r1"));
            assert_eq!(view.status.as_deref(), Some("COMPLETED"));
            assert_eq!(view.parent_run_id, None);
            assert_eq!(
                view.content.as_ref().and_then(Content::as_text),
                value["content"].as_str()
            );
            assert_eq!(view.created_at, Some(1_700_000_000));
            let metrics = view.metrics.expect("metrics");
            assert_eq!(metrics.total_tokens, Some(9320));
            assert_eq!(metrics.duration, Some(6.42));
            assert_eq!(metrics.cost, None);
            let messages = view.messages.expect("messages");
            let roles: Vec<_> = messages.iter().filter_map(|m| m.role.as_deref()).collect();
            assert_eq!(roles, ["user", "assistant", "tool"]);
            assert_eq!(messages[0].from_history, Some(false));
            assert_eq!(messages[1].content, None);
            let call = &messages[1].tool_calls.as_ref().expect("calls")[0];
            assert_eq!(call.kind.as_deref(), Some("function"));
            let function = call.function.as_ref().expect("function");
            assert_eq!(
                function.arguments.as_ref().map(Content::to_value),
                Some(value["messages"][1]["tool_calls"][0]["function"]["arguments"].clone())
            );
            assert_eq!(messages[1].metrics.and_then(|m| m.input_tokens), Some(900));
            assert_eq!(
                messages[2].content,
                Some(Content::Json(json!([{"type": "text", "text": "ok"}])))
            );
            assert_eq!(messages[2].tool_call_id.as_deref(), Some("c1"));
        }
        let view = text.view().expect("reads");
        assert!(matches!(view.run_id, Some(Cow::Borrowed("r1"))));
        // An escape sequence needs a copy; the text is the same.
        assert!(matches!(view.content, Some(Content::Text(Cow::Owned(_)))));
        let messages = view.messages.expect("messages");
        assert!(matches!(
            messages[0].content,
            Some(Content::Text(Cow::Borrowed("Lisbon?")))
        ));
    }

    /// A malformed run, or a field of another type than agno writes, is a serialization
    /// error for that run; fields the view does not hold may be nested to any depth.
    #[test]
    fn what_the_view_cannot_read_is_an_error_and_deep_values_are_skimmed() {
        let malformed = RunJson::from_stored_text(r#"{"run_id": "r1", "x": [}"#.into())
            .expect("kept unchecked");
        assert_eq!(
            malformed.view().expect_err("malformed").kind(),
            crate::ErrorKind::Serialization
        );
        let typed = RunJson::from_stored_text(r#"{"run_id": "r1", "status": 3}"#.into())
            .expect("an object");
        assert_eq!(
            typed.view().expect_err("a number status").kind(),
            crate::ErrorKind::Serialization
        );
        assert!(typed.to_value().is_ok());
        let deep = format!(
            r#"{{"run_id": "r1", "session_state": {}{}}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let deep = RunJson::from_stored_text(deep).expect("an object");
        assert_eq!(deep.view().expect("skimmed").run_id.as_deref(), Some("r1"));
    }

    /// Copies of a run share one view, read once; a run held as a value gives the same view.
    #[test]
    fn copies_of_a_run_share_its_view() {
        let text = RunJson::from_stored_text(run().to_string()).expect("an object");
        let copy = text.clone();
        let first = copy.shared_view().expect("reads");
        let again = text.shared_view().expect("read");
        assert!(std::ptr::eq(first.get(), again.get()));
        assert!(matches!(first.get().run_id, Some(Cow::Borrowed("r1"))));
        assert_eq!(first.get(), &text.view().expect("reads"));
        let value = RunJson::from(run());
        assert_eq!(value.shared_view().expect("reads").get(), first.get());
        drop((text, copy));
        // The view keeps the text it borrows from.
        assert_eq!(first.get().status.as_deref(), Some("COMPLETED"));
        let bad = RunJson::from_stored_text(r#"{"run_id": 1}"#.into()).expect("an object");
        for _ in 0..2 {
            assert_eq!(
                bad.shared_view().expect_err("a number id").kind(),
                crate::ErrorKind::Serialization
            );
        }
    }

    /// A session's views come in the order of its runs, on several threads past 1 MiB.
    #[test]
    fn a_sessions_views_follow_its_runs() {
        let mut session = crate::Session::new("s1", crate::SessionType::Agent, "a1");
        session.runs = Some(crate::run_json::padded_runs(3000));
        let ids: Vec<String> = session
            .run_views()
            .expect("reads")
            .iter()
            .filter_map(|v| v.run_id.as_deref().map(str::to_owned))
            .collect();
        let expected: Vec<String> = (0..3000).map(|i| format!("r{i}")).collect();
        assert_eq!(ids, expected);
        let shared: Vec<String> = session
            .shared_run_views()
            .expect("reads")
            .iter()
            .filter_map(|v| v.get().run_id.as_deref().map(str::to_owned))
            .collect();
        assert_eq!(shared, expected);
    }
}
