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
mod tests;
