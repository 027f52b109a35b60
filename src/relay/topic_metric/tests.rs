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
