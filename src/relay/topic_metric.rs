//! `walrelay_records_published_by_topic_total{topic}`: records per topic,
//! with a label set that stays small and carries no row identifiers.
//!
//! An outbox topic is made from row values by its template. A template
//! that uses only the route's aggregate type and event type columns makes
//! a few topics, one per kind of event (`outbox.event.Order`); one that
//! uses any other column — the aggregate id, the event id, a tenant header
//! column — makes one topic per aggregate, event or tenant: as labels they
//! would put row identifiers into `/metrics` and grow one series each, for
//! ever (memory here, and a cardinality bomb in Prometheus).
//!
//! Invariants:
//! - A topic that the template of an *identifying* route (one using any
//!   other column) could have made is counted under that template's text
//!   (`topic="outbox.{aggregateid}"`), never under its own name.
//! - Every other topic (classifier-only templates, `[[table]]` topics, the
//!   heartbeat topic: all fixed by configuration or by kinds of events) is
//!   counted under its own name, until [`MAX_NAMED_TOPICS`](crate::telemetry::MAX_NAMED_TOPICS) names exist;
//!   after that, new names count under `topic="other"`.
//! - Errors name such a topic by its template too ([`TopicCounters::shown`]).
//! - Memory is bounded: at most `MAX_NAMED_TOPICS` + one per identifying
//!   template + 1 series, and the per-session lookup cache is cleared when
//!   it reaches [`MAX_CACHED`] entries.

use std::collections::HashMap;
use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;

use crate::config::Config;
use crate::config::{Segment, TopicTemplate};
use crate::telemetry::Metrics;

/// The label limits live with the metrics (telemetry, below relay), which
/// apply them to topics not made from row identifiers as well.
pub use crate::telemetry::OTHER;

/// Topic names remembered per session (a lookup cache, not the series).
const MAX_CACHED: usize = 1024;

/// A session's counters by topic; see the [module documentation](self).
pub(super) struct TopicCounters {
    metrics: Arc<Metrics>,
    /// The templates of identifying routes, with their text as the label.
    identifying: Vec<(TopicTemplate, String)>,
    cache: HashMap<Arc<str>, Counter>,
    /// The last record's topic and its counter: most records find their
    /// counter by pointer, without hashing the name.
    last: Option<(Arc<str>, Counter)>,
}

impl TopicCounters {
    pub(super) fn new(config: &Config, metrics: Arc<Metrics>) -> TopicCounters {
        let identifying = config
            .outbox
            .iter()
            .filter(|o| {
                o.topic
                    .columns()
                    .any(|c| c != o.aggregate_type_column && c != o.type_column)
            })
            .map(|o| (o.topic.clone(), o.topic.as_str().to_owned()))
            .collect();
        TopicCounters {
            metrics,
            identifying,
            cache: HashMap::new(),
            last: None,
        }
    }

    /// Counts one record handed to the producer for `topic`.
    pub(super) fn count(&mut self, topic: &Arc<str>) {
        if let Some((last, counter)) = &self.last
            && Arc::ptr_eq(last, topic)
        {
            counter.inc();
            return;
        }
        let counter = match self.cache.get(topic) {
            Some(counter) => counter.clone(),
            None => {
                let counter = self.counter_for(topic);
                if self.cache.len() >= MAX_CACHED {
                    self.cache.clear();
                }
                self.cache.insert(topic.clone(), counter.clone());
                counter
            }
        };
        counter.inc();
        self.last = Some((topic.clone(), counter));
    }

    /// The template of the identifying route that could have made `topic`.
    fn identifying_template(&self, topic: &str) -> Option<&str> {
        self.identifying
            .iter()
            .find(|(template, _)| could_make(template.segments(), topic))
            .map(|(_, text)| text.as_str())
    }

    /// How errors name `topic`: by its template when an identifying route
    /// could have made it (the name carries row values), else by name.
    pub(super) fn shown(&self, topic: &str) -> String {
        match self.identifying_template(topic) {
            Some(template) => format!("{template} (a topic of this template)"),
            None => topic.to_owned(),
        }
    }

    fn counter_for(&self, topic: &str) -> Counter {
        let label = match self.identifying_template(topic) {
            Some(text) => text.to_owned(),
            None => self.metrics.topic_label(topic),
        };
        self.metrics
            .records_by_topic
            .get_or_create(&vec![("topic", label)])
            .clone()
    }
}

/// Whether some row could make `topic` from these segments: the literals
/// in order, each placeholder any text between them.
fn could_make(segments: &[Segment], topic: &str) -> bool {
    match segments.split_first() {
        None => topic.is_empty(),
        Some((Segment::Literal(lit), rest)) => topic
            .strip_prefix(lit.as_str())
            .is_some_and(|tail| could_make(rest, tail)),
        Some((Segment::Column(_), rest)) => {
            // Adjacent placeholders are one wildcard.
            let rest = match rest.split_first() {
                Some((Segment::Column(_), more)) => more,
                _ => rest,
            };
            match rest.first() {
                None => true,
                Some(_) => topic
                    .char_indices()
                    .map(|(i, _)| i)
                    .chain(std::iter::once(topic.len()))
                    .any(|i| could_make(rest, &topic[i..])),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::MAX_NAMED_TOPICS;

    fn counters(outbox: &str) -> (TopicCounters, Arc<Metrics>) {
        let config = Config::from_str(
            &format!(
                "[connector]\nname = \"orders\"\n[postgres]\ndatabase = \"app\"\n[kafka]\n\
                 brokers = \"127.0.0.1:9\"\n{outbox}"
            ),
            "test.toml",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let metrics = Arc::new(Metrics::new("orders"));
        (TopicCounters::new(&config, metrics.clone()), metrics)
    }

    fn exposition(metrics: &Metrics) -> String {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("by_topic", "", metrics.records_by_topic.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry)
            .unwrap_or_else(|e| panic!("{e}"));
        text
    }

    #[test]
    fn identifying_topics_count_under_their_template_and_names_stop_at_the_cap() {
        let (mut c, metrics) = counters(
            "[[outbox]]\ntable = \"a.outbox\"\ntopic = \"acct.{aggregateid}\"\n\
             [[outbox]]\ntable = \"b.outbox\"\ntopic = \"kinds.{aggregatetype}.{type}\"\n",
        );
        for i in 0..1000 {
            c.count(&Arc::from(format!("acct.customer-{i}")));
        }
        for i in 0..MAX_NAMED_TOPICS + 50 {
            c.count(&Arc::from(format!("kinds.K{i}.Created")));
        }
        let text = exposition(&metrics);
        assert!(
            text.contains("by_topic_total{topic=\"acct.{aggregateid}\"} 1000"),
            "{text}"
        );
        assert!(!text.contains("customer-"), "{text}");
        assert!(
            text.contains("by_topic_total{topic=\"kinds.K0.Created\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("by_topic_total{topic=\"other\"} 50"),
            "{text}"
        );
        assert_eq!(
            text.matches("by_topic_total{").count(),
            MAX_NAMED_TOPICS + 2,
            "{text}"
        );
        assert!(c.cache.len() <= MAX_CACHED);
        assert_eq!(
            c.shown("acct.customer-7"),
            "acct.{aggregateid} (a topic of this template)"
        );
        assert_eq!(c.shown("kinds.K1.Created"), "kinds.K1.Created");
    }

    fn template(text: &str) -> TopicTemplate {
        TopicTemplate::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_template_could_make_exactly_the_names_its_literals_allow() {
        let t = template("outbox.{aggregatetype}.{aggregateid}");
        assert!(could_make(t.segments(), "outbox.Order.42"));
        assert!(could_make(t.segments(), "outbox..")); // empty values
        assert!(could_make(t.segments(), "outbox.a.b.c")); // dots in values
        assert!(!could_make(t.segments(), "outbox-Order.42"));
        assert!(!could_make(t.segments(), "orders.42"));
        let t = template("{aggregateid}-events");
        assert!(could_make(t.segments(), "42-events"));
        assert!(!could_make(t.segments(), "42-events.x"));
        let t = template("fixed");
        assert!(could_make(t.segments(), "fixed"));
        assert!(!could_make(t.segments(), "fixed2"));
    }
}
