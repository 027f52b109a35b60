//! Setting up one replication session: server checks, publication, Kafka
//! producer and offset store, the slot plan and the order of its steps with
//! the offset-store writes (what is done to the slot is `source::slot`'s),
//! the start decision, START_REPLICATION.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::offset_writer::{OffsetWriter, TransactionLimits};
use super::snapshot::SnapshotEnd;
use super::streaming::{LoopEnd, Streaming};
use super::{Ack, RelayError, Sink};
use crate::Lsn;
use crate::config::{Config, SnapshotMode};
use crate::offsets::{self, OffsetStore, SnapshotProgress, SnapshotState, StoredOffset};
use crate::pg::catalog;
use crate::pg::params::{capture_params, connect_params};
use crate::pg::replication::ReplicationClient;
use crate::router::Router;
use crate::sink::error::SinkErrorKind;
use crate::sink::probe::{ProbeError, probe_cluster};
use crate::sink::properties::{producer_properties, transactional_id};
use crate::source::{Origin, SnapshotTable, Source, slot};
use crate::startup::{self, SlotPlan};
use crate::task::AbortOnDrop;
use crate::telemetry::Metrics;

/// Everything needed to start one replication session.
pub(super) struct Session {
    pub(super) config: Arc<Config>,
    pub(super) accept_slot_position: bool,
    pub(super) metrics: Arc<Metrics>,
    /// Kafka's outages, shared by every session's producer.
    pub(super) kafka_outage: Arc<crate::telemetry::outage::OutageLog>,
    /// The lease's check before anything is handed to Kafka, and its term.
    pub(super) fence: crate::source::lease::Fence,
    /// `[kafka.schema_registry]`'s client, shared by every session.
    pub(super) registry: Option<Arc<crate::sink::registry::Registry>>,
}

/// A session that reached START_REPLICATION.
pub(super) struct Started {
    pub(super) run: Streaming,
    pub(super) source: Source,
    pub(super) acks: mpsc::UnboundedReceiver<Ack>,
    pub(super) status_interval: Duration,
    /// Silence after which the replication connection is presumed dead.
    pub(super) receive_timeout: Duration,
    /// The initial snapshot this session takes before streaming.
    pub(super) snapshot: Option<SnapshotJob>,
}

/// A snapshot to take before streaming.
#[derive(Debug, Clone, Copy)]
pub(super) struct SnapshotJob {
    /// `initial_only`: stop once the snapshot is in Kafka.
    pub(super) stop_after: bool,
}

impl Started {
    /// The session's one loop ([`Streaming::stream`]), for the snapshot
    /// phase and for streaming alike.
    async fn stream(&mut self, shutdown: &CancellationToken) -> Result<LoopEnd, RelayError> {
        self.run
            .stream(
                &mut self.source,
                &mut self.acks,
                self.status_interval,
                self.receive_timeout,
                shutdown,
            )
            .await
    }

    /// Streams until shutdown (then stops gracefully) or an error.
    pub(super) async fn run(mut self, shutdown: &CancellationToken) -> Result<(), RelayError> {
        if let Some(job) = self.snapshot.take() {
            self.run.begin_snapshot(&self.source)?;
            let end = match self.stream(shutdown).await {
                Ok(LoopEnd::SnapshotSafe) => match self.run.complete_snapshot(&mut self.acks).await
                {
                    Err(e) => Err(self.run.explain_overrun(e).await),
                    done => done,
                },
                Ok(LoopEnd::Shutdown) => {
                    self.run.snapshot_abandoned();
                    tracing::info!(
                        "stopped during the snapshot; the next start takes it again from the beginning"
                    );
                    Ok(SnapshotEnd::Stopped)
                }
                Err(e) => {
                    self.run.snapshot_abandoned();
                    Err(e)
                }
            };
            let pg = &self.run.config().postgres;
            let end = match end {
                Ok(end) => end,
                Err(e) => {
                    if !e.is_transient() {
                        // Nothing retries soon: the slot created for this
                        // snapshot is inactive and holds WAL meanwhile.
                        tracing::warn!(
                            slot = %pg.slot,
                            "the snapshot stopped; replication slot {:?} stays at the snapshot's \
                             consistent point and holds back WAL (watch walrelay_slot_lag_bytes / \
                             pg_replication_slots) until walrelay runs again and takes the \
                             snapshot again; if walrelay will not run for a long time, drop it: \
                             SELECT pg_drop_replication_slot('{}')",
                            pg.slot,
                            pg.slot.replace('\'', "''")
                        );
                    }
                    return Err(e);
                }
            };
            match end {
                SnapshotEnd::Stopped => return super::stopped_by_signal(self.run.config()),
                SnapshotEnd::Completed { .. } if job.stop_after => {
                    tracing::info!(
                        slot = %pg.slot,
                        "initial_only: the snapshot is in Kafka; stopping. The slot stays at the \
                         snapshot's consistent point and holds WAL until `walrelay run` streams \
                         from it (nothing lost in between) or it is dropped"
                    );
                    return Ok(());
                }
                SnapshotEnd::Completed {
                    consistent_point, ..
                } => {
                    let catalog = catalog::connect(&capture_params(self.run.config())).await?;
                    if let Err(e) = self
                        .source
                        .start_streaming(&catalog, &pg.slot, &pg.publication)
                        .await
                    {
                        return Err(explained(self.run.config(), e.into()).await);
                    }
                    tracing::info!(
                        slot = %pg.slot, publication = %pg.publication, lsn = %consistent_point,
                        "streaming"
                    );
                }
            }
        }
        // Heartbeats while this session streams; the writer ends with it.
        let heartbeats = self.run.config().heartbeat.enabled().map(|interval| {
            let config = &self.run.config();
            AbortOnDrop::from(tokio::spawn(super::heartbeat::write_loop(
                connect_params(config),
                config.connector.name.clone(),
                interval,
                self.run.metrics().clone(),
            )))
        });
        let result = self.stream(shutdown).await;
        drop(heartbeats);
        // Streaming ends only on shutdown or an error (`SnapshotSafe` is
        // the snapshot phase's end, above).
        let Err(e) = result else {
            let done = self
                .run
                .finish(&mut self.source, &mut self.acks, self.status_interval)
                .await;
            match self.source.close(done.position).await {
                Ok(pos) => tracing::info!(lsn = %pos, "stopped; final position reported"),
                Err(e) => {
                    tracing::warn!(error = %e, "stopped; could not send the final status update")
                }
            }
            return Ok(());
        };
        let refused = matches!(&e, RelayError::Delivery { error, .. } if error.kind == SinkErrorKind::Definite);
        if matches!(&e, RelayError::Delivery { error, at_send: false, .. } if error.kind == SinkErrorKind::Definite)
        {
            // Kafka refused a record for good. Records queued behind it must
            // not reach Kafka before it (per-aggregate order): drop them now;
            // the next session re-sends them after the refused one. (Refused
            // when handed to the producer, nothing is queued behind it, and
            // the records before it are let through.)
            self.run.purge_queued();
        }
        let one_bad_change = refused
            || matches!(
                &e,
                RelayError::Route(_)
                    | RelayError::Unroutable { .. }
                    | RelayError::Decode { .. }
                    | RelayError::Stream { .. }
            );
        if one_bad_change {
            // The connections are fine and the problem is one change: let
            // Kafka settle what was sent before it, store and confirm exactly
            // the acknowledged prefix, so the operator restarts right at the
            // bad change.
            let done = self
                .run
                .finish(&mut self.source, &mut self.acks, self.status_interval)
                .await;
            match self.source.close(done.position).await {
                Ok(pos) => tracing::info!(
                    lsn = %pos,
                    not_delivered = done.undelivered,
                    flush_timed_out = done.timed_out,
                    "stopped before the failing change: PostgreSQL and the offset store confirm \
                     everything Kafka acknowledged up to this position; later changes were not \
                     confirmed and will be sent again after the fix"
                ),
                Err(err) => tracing::warn!(
                    error = %err, lsn = %done.position,
                    "stopped before the failing change; could not send the final status update \
                     (the slot stays at its previous position, which is safe)"
                ),
            }
        }
        Err(explained(self.run.config(), e).await)
    }
}

/// [`super::explain_stream_error`] with the catalog read after the
/// error; only an `undefined_object` error costs a connection. When the
/// catalog cannot be read, the error passes through as it came.
async fn explained(config: &Config, e: RelayError) -> RelayError {
    if !super::error::is_undefined_object(&e) {
        return e;
    }
    let pg = &config.postgres;
    let present = async {
        // The slot's server (a standby has the primary's publications too).
        let client = catalog::connect(&capture_params(config)).await?;
        Ok::<_, catalog::CatalogError>(super::error::ObjectsPresent {
            publication: catalog::publication(&client, &pg.publication)
                .await?
                .is_some(),
            slot: catalog::slot_state(&client, &pg.slot).await?.is_some(),
        })
    };
    match present.await {
        Ok(present) => super::explain_stream_error(e, present, &pg.publication, &pg.slot),
        Err(lookup) => {
            tracing::debug!(error = %lookup, "could not read the publication and the slot to explain a walsender error");
            e
        }
    }
}

impl Session {
    /// Checks, connects and starts replication (see the module doc).
    /// `None`: nothing to do (`initial_only` after its snapshot).
    pub(super) async fn setup(&self) -> Result<Option<Started>, RelayError> {
        let config = self.config.clone();
        let pg = &config.postgres;
        let params = connect_params(&config);
        // The slot's server: the primary, or the standby captured from.
        let capture = capture_params(&config);
        let mut router = Router::new(&config.outbox);

        // 1. Server checks and publication, on an ordinary connection: the
        //    same checks `walrelay check` runs (crate::startup).
        let catalog = catalog::connect(&params).await?;
        startup::wal_level(&catalog).await?;
        startup::replication_privilege(&catalog, &pg.user).await?;
        if config.heartbeat.enabled().is_some() {
            startup::heartbeat_privilege(&catalog, &pg.user).await?;
        }
        let (read_only_watermarks, watermarks) =
            startup::incremental_watermarks(&catalog, config.snapshot.watermarks, &pg.user).await?;
        if read_only_watermarks && config.snapshot.watermarks == crate::config::Watermarks::Auto {
            tracing::info!("incremental snapshots: {watermarks}");
        }
        let mut tables = Vec::with_capacity(config.outbox.len());
        for outbox in &config.outbox {
            let table = startup::outbox_table(&catalog, outbox).await?.0;
            let partitions: Vec<(String, String)> = table
                .partitions
                .iter()
                .map(|(_, schema, name)| (schema.clone(), name.clone()))
                .collect();
            router.add_partitions(&table.schema, &table.name, &partitions);
            tables.push(table);
        }
        let routes: Vec<_> = config.outbox.iter().zip(&tables).collect();
        let captured = startup::table_event_tables(&catalog, &config).await?;
        let captured_tables: Vec<_> = captured.iter().map(|c| &c.table).collect();
        startup::publication(&catalog, pg, &routes, &captured_tables)
            .await?
            .apply(&catalog)
            .await?;
        // On a standby, the slot's catalog rows and settings are read there;
        // everything that writes stays on the primary (`catalog`).
        let standby = if pg.capture_from.from_standby() {
            let client = catalog::connect(&capture).await?;
            let server = startup::capture_server(&client, pg.capture_from).await?;
            for warning in &server.warnings {
                tracing::warn!(standby = %capture.address(), "{warning}");
            }
            Some((client, server.in_recovery))
        } else {
            None
        };
        let slots = standby.as_ref().map_or(&catalog, |(client, _)| client);
        // A slot created on a standby: the primary is nudged meanwhile, and
        // it cannot be a failover slot there.
        let (nudge, failover_slot) = match &standby {
            Some((_, true)) => (slot::Nudge(Some(&catalog)), false),
            _ => (slot::Nudge(None), pg.failover_slot),
        };
        let sender_timeout = catalog::setting(slots, "wal_sender_timeout").await?;
        let status_interval = effective_status_interval(pg.status_interval, &sender_timeout);
        let receive_timeout = receive_timeout(&sender_timeout);

        // 2. Kafka: producer, offset topic, stored offset.
        let properties = producer_properties(&config);
        let (sink, mut acks) = match config.kafka.bulk_linger_ms() {
            Some(behind) => Sink::with_bulk(&properties, &behind, self.kafka_outage.clone()),
            None => Sink::new(&properties, self.kafka_outage.clone()),
        }
        .map_err(RelayError::Sink)?;
        // Refused credentials or certificates are definite: find out before
        // the offset-store clients below would only time out (librdkafka
        // retries a refused connection forever). Anything else (brokers
        // down) is left to the steps below, which wait and retry as before.
        let probe = {
            let properties = properties.clone();
            tokio::task::spawn_blocking(move || probe_cluster(&properties, Duration::from_secs(10)))
                .await
                .map_err(|_| RelayError::Ended("Kafka connection probe"))?
        };
        match probe {
            Ok(report) => tracing::info!(brokers = report.brokers, "connected to Kafka {report}"),
            Err(ProbeError::Refused(e)) => return Err(RelayError::Sink(e)),
            Err(ProbeError::Unreachable(why)) => tracing::debug!("Kafka probe: {why}"),
        }
        let transactions = TransactionLimits::of(&config);
        if let Some(limits) = transactions {
            // Before the offset store is read: registering the transactional
            // id fences the previous producer and aborts its open
            // transaction, whose records and position a `read_committed`
            // reader would otherwise wait for (up to transaction_timeout).
            sink.init_transactions(limits.timeout)
                .await
                .map_err(RelayError::Sink)?;
            tracing::info!(
                transactional_id = %transactional_id(&config),
                "exactly_once: transactional producer ready (any earlier producer of this connector is fenced)"
            );
        }
        let store = OffsetStore::new(
            &properties,
            &config.kafka.offsets_topic,
            &config.connector.name,
        );
        store.ensure_topic(Duration::from_secs(10)).await?;
        // Reading the topic polls a consumer, which blocks.
        let stored = tokio::task::spawn_blocking(move || store.load(Duration::from_secs(10)))
            .await
            .map_err(|_| RelayError::Ended("offset store reader"))??;

        // 3. Replication connection, slot, and the start decision.
        let mut repl = ReplicationClient::connect(&capture).await?;
        let in_progress =
            crate::source::in_progress_requested(&config, Some(repl.server_version_num()))
                .map_err(|e| RelayError::Setup {
                    what: e.to_string(),
                    fix: e.fix().to_owned(),
                })?;
        repl.stream_in_progress(in_progress);
        let system = repl.identify_system().await?;
        let existing = slot::inspect(slots, &pg.slot).await?;
        if let Some(existing) = &existing {
            startup::slot_shape(existing, &pg.slot, &pg.database)?;
        }
        let mut specs = super::incremental::Specs::new(&config, &captured);
        specs.read_only = read_only_watermarks;
        let offset_template = StoredOffset {
            connector: config.connector.name.clone(),
            system_id: system.system_id.clone(),
            timeline: system.timeline,
            slot: pg.slot.clone(),
            lsn: Lsn::ZERO,
            written_at_ms: 0,
            committed_at_ms: stored.as_ref().and_then(|s| s.committed_at_ms),
            snapshot: stored
                .as_ref()
                .and_then(|s| s.snapshot.clone())
                .filter(|s| s.state == SnapshotState::Completed),
            accepted_gap: stored.as_ref().and_then(|s| s.accepted_gap.clone()),
            incremental: stored.as_ref().and_then(|s| s.incremental.clone()),
            known_tables: specs.names(),
            term: Some(self.fence.term()),
        };
        let mut offsets =
            OffsetWriter::new(offset_template, &config.kafka.offsets_topic, Lsn::ZERO)
                .transactional(transactions)
                .fenced(self.fence.clone());
        let plan = startup::slot_plan(
            config.snapshot.mode,
            stored.as_ref(),
            existing.as_ref(),
            pg,
            self.accept_slot_position,
        )?;
        // A resumable snapshot, checked against the server as it is now.
        let (plan, unfiltered) = super::snapshot::checked_plan(plan, stored.as_ref(), slots).await;
        let existing_slot = match plan {
            SlotPlan::NothingToDo { why } => {
                tracing::info!("{why}; stopping");
                return Ok(None);
            }
            SlotPlan::Snapshot {
                drop_first,
                why,
                replaces_stream_at,
                resume,
            } => {
                for (outbox, table) in &routes {
                    startup::snapshot_privileges(&catalog, table).await?;
                    startup::snapshot_order(&catalog, outbox, table).await?;
                }
                for c in &captured {
                    startup::snapshot_privileges(&catalog, &c.table).await?;
                    startup::table_snapshot_order(&config, c)?;
                }
                // PostgreSQL 18 invalidates a slot inactive for longer than
                // this; the snapshot's slot is inactive until streaming starts.
                let idle_limit = slots
                    .query_one(
                        "SELECT coalesce(current_setting('idle_replication_slot_timeout', true), '0')",
                        &[],
                    )
                    .await
                    .map(|r| r.get::<_, String>(0))
                    .unwrap_or_else(|_| "0".into());
                if drop_first {
                    startup::snapshot_outlived_idle_timeout(
                        stored.as_ref(),
                        existing.as_ref(),
                        &pg.slot,
                        &idle_limit,
                    )?;
                }
                if idle_limit != "0" {
                    tracing::warn!(
                        idle_replication_slot_timeout = %idle_limit,
                        "the snapshot's slot is inactive until the snapshot is in Kafka, and \
                         idle_replication_slot_timeout = {idle_limit} lets a checkpoint invalidate \
                         it if the snapshot takes longer; then the snapshot is taken again. Set it \
                         to 0 or well above the snapshot's duration (postgresql.conf, then reload)"
                    );
                }
                let (consistent_point, origin, tables_done) = if let Some(point) = resume {
                    tracing::info!(slot = %pg.slot, lsn = %point, "resuming the initial snapshot: {why}");
                    if let Some(unfiltered) = &unfiltered {
                        tracing::warn!(
                            slot = %pg.slot,
                            "the resumed snapshot reads the tables not done unfiltered and as \
                             they are now, on the same slot: {unfiltered}; each reader's part \
                             goes on from its stored key where the table's columns are as they \
                             were (a table whose column types changed is read whole); rows \
                             written since its consistent point may come twice (as snapshot \
                             records and streamed), none is lost"
                        );
                    }
                    // `resumable` was checked on this progress: it is stored.
                    let progress = stored
                        .as_ref()
                        .and_then(|s| s.snapshot.clone())
                        .ok_or(RelayError::Ended("the stored snapshot progress"))?;
                    let (origin, progress) =
                        super::snapshot::resumed(progress, unfiltered.is_none());
                    let done = progress.tables_done.clone();
                    // The marker as stored (`running`, its point, its
                    // readers' snapshot, the tables done), this attempt
                    // counted: stored below, before any row is published.
                    offsets.template_mut().snapshot = Some(progress);
                    (point, origin, done)
                } else {
                    if replaces_stream_at.is_some() {
                        tracing::warn!(slot = %pg.slot, "taking a new snapshot: {why}");
                    } else {
                        tracing::info!(slot = %pg.slot, "taking the initial snapshot: {why}");
                    }
                    // A full snapshot supersedes an incremental one under way.
                    let marker = offsets.template_mut();
                    marker.incremental = None;
                    // Stored before the slot exists: whatever happens next, the
                    // next start knows a snapshot was under way.
                    marker.snapshot = Some(SnapshotProgress {
                        state: SnapshotState::Running,
                        tables_done: Vec::new(),
                        rows: 0,
                        consistent_point: None,
                        taken: None,
                        shapes: Vec::new(),
                        attempt: 0,
                        parts: Vec::new(),
                    });
                    offsets
                        .store(
                            &sink,
                            &mut acks,
                            Lsn::ZERO,
                            "the offset-store write marking the snapshot as running",
                            &config,
                            &self.metrics,
                        )
                        .await?;
                    // Every transaction the new slot streams commits after this.
                    let before_slot = super::heartbeat::now_ms();
                    let created = slot::create_for_snapshot(
                        &mut repl,
                        &catalog,
                        &params,
                        &pg.slot,
                        failover_slot,
                        drop_first,
                        &self.metrics.slot_creation_waiting_for,
                        nudge,
                    )
                    .await?;
                    // The marker again, now naming the slot's consistent point:
                    // where the hand-over to streaming expects the slot, for
                    // `status` and whoever reads the offset store next.
                    let previous_point = stored
                        .as_ref()
                        .and_then(|s| s.snapshot.as_ref())
                        .and_then(|s| s.consistent_point.clone());
                    let marker = offsets.template_mut();
                    let stream_committed_at = marker.committed_at_ms.replace(before_slot);
                    if let Some(progress) = marker.snapshot.as_mut() {
                        progress.consistent_point = Some(created.consistent_point.to_string());
                    }
                    if let Some(from) = replaces_stream_at {
                        // What no stream and no snapshot carries, said plainly and
                        // kept in the offset store for `walrelay status`.
                        tracing::warn!(
                            from = %from, to = %created.consistent_point,
                            "changes committed between {from} and {} were never streamed: the new \
                             snapshot has the rows that exist at its consistent point, but an outbox \
                             row inserted and deleted in between, and every update or delete of a \
                             [[table]] capture in between, is lost; reconcile that range \
                             (docs/operations.md, \"Lost slot\"). Recorded as an accepted gap",
                            created.consistent_point
                        );
                        marker.accepted_gap = Some(crate::offsets::AcceptedGap {
                            from,
                            to: created.consistent_point.to_string(),
                            accepted_at_ms: super::heartbeat::now_ms(),
                            from_committed_at_ms: stream_committed_at,
                        });
                    } else if let Some(gap) = marker.accepted_gap.as_mut()
                        && previous_point.is_some_and(|p| p == gap.to)
                    {
                        // A re-snapshot that replaced a stream was interrupted and
                        // is taken again: the gap now ends at the new point.
                        gap.to = created.consistent_point.to_string();
                    }
                    offsets
                        .store(
                            &sink,
                            &mut acks,
                            Lsn::ZERO,
                            "the offset-store write of the snapshot's consistent point",
                            &config,
                            &self.metrics,
                        )
                        .await?;
                    (
                        created.consistent_point,
                        Origin::Exported(created.snapshot_name.clone()),
                        Vec::new(),
                    )
                };
                let snapshot_tables: Vec<SnapshotTable> = config
                    .outbox
                    .iter()
                    .map(|o| {
                        SnapshotTable::outbox(
                            &o.table.schema,
                            &o.table.name,
                            &o.snapshot_order_by,
                            &o.aggregate_id_column,
                        )
                    })
                    .chain(captured.iter().map(|c| {
                        let key = c.snapshot_order(&config.tables[c.entry]);
                        SnapshotTable::captured(&c.table.schema, &c.table.name, key)
                    }))
                    .filter(|t| {
                        let done = tables_done.contains(&t.display());
                        if done {
                            tracing::info!(table = %t.display(), "snapshot: table done before the interruption, not read again");
                        }
                        !done
                    })
                    .collect();
                let source = Source::snapshot(
                    repl,
                    (consistent_point, &origin),
                    &capture,
                    &pg.publication,
                    &snapshot_tables,
                    config.snapshot.parallelism,
                    config.snapshot.fetch_rows,
                )
                .await?;
                {
                    // What a restart needs to resume this snapshot on its
                    // slot instead of taking it again (the readers'
                    // snapshot, the shapes), or this resumption's attempt
                    // number: stored before any of its rows is published.
                    if let (Origin::Exported(_), Some((taken, shapes)), Some(progress)) = (
                        &origin,
                        source.snapshot_taken(),
                        offsets.template_mut().snapshot.as_mut(),
                    ) {
                        progress.taken = Some(taken.to_owned());
                        progress.shapes = shapes.to_vec();
                    }
                    offsets
                        .store(
                            &sink,
                            &mut acks,
                            Lsn::ZERO,
                            "the offset-store write of the snapshot's readers' snapshot and attempt",
                            &config,
                            &self.metrics,
                        )
                        .await?;
                    if let Origin::Exported(_) = origin {
                        tracing::info!(
                            lsn = %consistent_point,
                            "the snapshot is resumable: the offset store holds its readers' \
                             snapshot, so a restart resumes it on this slot"
                        );
                    }
                }
                let mut run = Streaming::new(
                    config.clone(),
                    self.metrics.clone(),
                    sink,
                    router,
                    consistent_point,
                    offsets,
                    &captured,
                    specs,
                );
                run.set_registry(self.registry.clone());
                // Debezium's source.ts_ms of snapshot rows: the snapshot's time.
                run.set_snapshot_ms(crate::pg::replication::pg_us_to_unix_ms(
                    crate::pg::replication::pg_now_us(),
                ));
                return Ok(Some(Started {
                    run,
                    source,
                    acks,
                    status_interval,
                    receive_timeout,
                    snapshot: Some(SnapshotJob {
                        stop_after: config.snapshot.mode == Some(SnapshotMode::InitialOnly),
                    }),
                }));
            }
            SlotPlan::Resume => existing.ok_or_else(|| RelayError::Setup {
                what: format!(
                    "replication slot {:?} vanished while walrelay was starting",
                    pg.slot
                ),
                fix: "make sure nothing else drops walrelay's slot".into(),
            })?,
            SlotPlan::CreateAndStream => {
                // Every transaction the new slot streams commits after this.
                offsets.template_mut().committed_at_ms = Some(super::heartbeat::now_ms());
                slot::create(&mut repl, slots, &pg.slot, failover_slot, nudge).await?
            }
        };
        // Past timeline 1 (a promoted standby, a restore), the history says
        // whether the stored position means the same on this timeline.
        let history = repl.timeline_history(system.timeline).await?;
        slot::make_failover(&mut repl, &existing_slot, &pg.slot, failover_slot).await?;
        let server = offsets::Server {
            system_id: &system.system_id,
            timeline: system.timeline,
            history: history.as_deref(),
        };
        // A snapshot marked running that is not taken again (no_data) says
        // nothing about positions.
        let stored = stored.filter(|s| !s.snapshot_interrupted());
        let start = startup::start_position(
            stored.as_ref(),
            &existing_slot,
            &server,
            &pg.slot,
            self.accept_slot_position,
        )?;
        if start.accepted {
            // What was never streamed, said plainly and kept in the offset
            // store for `walrelay status`.
            if let Some(stored) = &stored {
                tracing::warn!(
                    from = %stored.lsn,
                    to = %start.from,
                    "changes committed between {} and {} were never streamed: reconcile exactly \
                     that range (walrelay republish --config <file> --where \"<the outbox rows \
                     committed in it>\"; docs/operations.md, \"Lost slot\")",
                    stored.lsn,
                    start.from
                );
                offsets.template_mut().accepted_gap = Some(crate::offsets::AcceptedGap {
                    from: stored.lsn.to_string(),
                    to: start.from.to_string(),
                    accepted_at_ms: super::heartbeat::now_ms(),
                    from_committed_at_ms: stored.committed_at_ms,
                });
            }
            // Store the accepted position now: the frontier may not pass it
            // for a long time (an idle database), and until the store holds
            // it every ordinary restart would be refused again.
            offsets
                .store(
                    &sink,
                    &mut acks,
                    start.from,
                    "the offset-store write of the accepted slot position",
                    &config,
                    &self.metrics,
                )
                .await?;
            tracing::info!(lsn = %start.from, "stored the accepted slot position in the offset store");
        }
        let start = start.from;

        // START_REPLICATION, then the check every start shares: the slot
        // is exactly where we read it (nobody advanced or recreated it;
        // `start` may be past it, see offsets::compare).
        let confirmed = existing_slot.confirmed_flush_lsn.unwrap_or(Lsn::ZERO);
        let mut source =
            match Source::resume(repl, slots, &pg.slot, start, confirmed, &pg.publication).await {
                Ok(source) => source,
                Err(e) => return Err(explained(&config, e.into()).await),
            };
        tracing::info!(
            slot = %pg.slot, publication = %pg.publication, lsn = %start,
            system_id = %system.system_id, timeline = system.timeline,
            ?status_interval, "streaming"
        );

        // An incremental snapshot to go on with, or tables added since the
        // offset was written.
        let (plan, added) = super::incremental::plan_at_start(&config, stored.as_ref(), &specs);
        let mut run = Streaming::new(
            config.clone(),
            self.metrics.clone(),
            sink,
            router,
            start,
            offsets,
            &captured,
            specs,
        );
        run.set_registry(self.registry.clone());
        for table in &added {
            tracing::info!(
                %table,
                "{table} was added to the configuration: its existing rows are published by an \
                 incremental snapshot while streaming continues"
            );
        }
        if let Some(plan) = &plan {
            // Every offset from now on carries the plan: what the start's
            // checks gave up is kept (said once), and tables added to the
            // configuration stay to be read even when an offset is written
            // before their first chunk (the offset also lists them as
            // known from now on).
            let rows = stored
                .as_ref()
                .and_then(|s| s.incremental.as_ref())
                .filter(|s| s.id == plan.id)
                .map_or(0, |s| s.rows);
            run.offset_template_mut().incremental = Some(super::incremental::to_stored(plan, rows));
        }
        if let Some(plan) = plan.filter(|p| !p.done()) {
            tracing::info!(
                id = %plan.id,
                tables = %plan.tables.iter().filter(|t| !t.done).map(|t| t.display()).collect::<Vec<_>>().join(", "),
                "incremental snapshot: reading beside the stream"
            );
            run.start_incremental(&mut source, plan);
        }
        drop(standby);
        drop(catalog);
        Ok(Some(Started {
            run,
            source,
            acks,
            status_interval,
            receive_timeout,
            snapshot: None,
        }))
    }
}

/// A server duration setting's text (`10s`, `60000` (ms), `1min`, `0`).
fn parse_setting_duration(text: &str) -> Option<Duration> {
    let t = text.trim();
    let (number, unit_ms) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = t.strip_suffix("min") {
        (n, 60_000)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1_000)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3_600_000)
    } else if let Some(n) = t.strip_suffix('d') {
        (n, 86_400_000)
    } else {
        (t, 1)
    };
    let n: u64 = number.trim().parse().ok()?;
    n.checked_mul(unit_ms).map(Duration::from_millis)
}

/// `min(configured, wal_sender_timeout / 2)`; the setting text is like `10s`,
/// `60000` (ms) or `0` (disabled).
fn effective_status_interval(configured: Duration, wal_sender_timeout: &str) -> Duration {
    match parse_setting_duration(wal_sender_timeout) {
        Some(d) if !d.is_zero() => configured.min(d / 2).max(Duration::from_millis(10)),
        _ => configured,
    }
}

/// How long the replication connection may stay silent — while we keep
/// asking the walsender for a reply — before it is presumed dead:
/// `wal_sender_timeout` (the server's own limit for our silence), at least
/// 30 s; 60 s when the server has no timeout.
fn receive_timeout(wal_sender_timeout: &str) -> Duration {
    const FLOOR: Duration = Duration::from_secs(30);
    match parse_setting_duration(wal_sender_timeout) {
        Some(d) if !d.is_zero() => d.max(FLOOR),
        _ => Duration::from_secs(60),
    }
}

#[cfg(test)]
mod tests;
