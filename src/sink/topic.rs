//! What the brokers say about a topic walrelay writes to
//! ([`describe_topic`]): whether it exists, its partitions and
//! `max.message.bytes`, and, when it does not, whether the broker creates it
//! on first write. Reading only.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::error::{SinkError, SinkErrorKind};

/// What the brokers say about a topic that walrelay writes to
/// ([`describe_topic`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicState {
    /// The topic exists with `partitions`; `max_message_bytes` is its
    /// `max.message.bytes` when the client may read its configuration.
    Exists {
        partitions: usize,
        max_message_bytes: Option<String>,
    },
    /// It does not exist; `auto_create` is the broker's
    /// `auto.create.topics.enable` (`None` when it could not be read).
    Missing { auto_create: Option<bool> },
    /// The client may not describe it (an ACL): the error code's name.
    Denied(String),
}

/// Describes `topic` without creating it: a metadata request that does
/// not auto-create (needs the DESCRIBE ACL, which WRITE implies), then,
/// where allowed, DescribeConfigs for the topic's `max.message.bytes` or,
/// when it is missing, a broker's `auto.create.topics.enable`. Only
/// client properties of `properties` are used.
pub async fn describe_topic(
    properties: &[(String, String)],
    topic: &str,
    timeout: Duration,
) -> Result<TopicState, SinkError> {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let mut cfg = ClientConfig::new();
    for (k, v) in properties {
        if k == "bootstrap.servers"
            || k == "client.id"
            || k.starts_with("security.")
            || k.starts_with("ssl.")
            || k.starts_with("sasl.")
            || k == "socket.timeout.ms"
            || k == "broker.address.family"
        {
            cfg.set(k, v);
        }
    }
    cfg.set_log_level(RDKafkaLogLevel::Emerg);
    let fail = |message: String| SinkError {
        kind: SinkErrorKind::Definite,
        message,
        code: None,
    };
    let mut meta_cfg = cfg.clone();
    meta_cfg.set("allow.auto.create.topics", "false");
    let name = topic.to_owned();
    let (topic_error, partitions, broker) = tokio::task::spawn_blocking(move || {
        let client: BaseConsumer = meta_cfg.create()?;
        let metadata = client.fetch_metadata(Some(&name), timeout)?;
        let broker = metadata.brokers().first().map(|b| b.id());
        let found = metadata.topics().iter().find(|t| t.name() == name);
        Ok::<_, KafkaError>((
            found.and_then(|t| t.error()),
            found.map_or(0, |t| t.partitions().len()),
            broker,
        ))
    })
    .await
    .map_err(|e| fail(e.to_string()))?
    .map_err(|e| fail(format!("reading the metadata of topic {topic:?}: {e}")))?;
    let admin: AdminClient<DefaultClientContext> = cfg.create().map_err(|e| fail(e.to_string()))?;
    let opts = AdminOptions::new().request_timeout(Some(timeout));
    match topic_error.map(RDKafkaErrorCode::from) {
        None => Ok(TopicState::Exists {
            partitions,
            max_message_bytes: config_value(
                &admin,
                &opts,
                ResourceSpecifier::Topic(topic),
                "max.message.bytes",
            )
            .await,
        }),
        Some(RDKafkaErrorCode::UnknownTopicOrPartition) => {
            let auto_create = match broker {
                Some(id) => config_value(
                    &admin,
                    &opts,
                    ResourceSpecifier::Broker(id),
                    "auto.create.topics.enable",
                )
                .await
                .map(|v| v == "true"),
                None => None,
            };
            Ok(TopicState::Missing { auto_create })
        }
        Some(
            code @ (RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed),
        ) => Ok(TopicState::Denied(format!("{code:?}"))),
        Some(code) => Err(fail(format!(
            "reading the metadata of topic {topic:?}: {code}"
        ))),
    }
}

/// One configuration value of `resource`; `None` when it cannot be read.
async fn config_value(
    admin: &rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext>,
    opts: &rdkafka::admin::AdminOptions,
    resource: rdkafka::admin::ResourceSpecifier<'_>,
    key: &str,
) -> Option<String> {
    let results = admin.describe_configs(&[resource], opts).await.ok()?;
    match results.into_iter().next() {
        Some(Ok(r)) => r.get(key).and_then(|e| e.value.clone()),
        _ => None,
    }
}
