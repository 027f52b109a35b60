use super::*;

use crate::sink::properties_for_tests as props;

/// Verification is on unless `enable.ssl.certificate.verification` is
/// one of librdkafka's false spellings; the last setting counts.
#[test]
fn certificate_verification_is_on_unless_turned_off() {
    let on = |pairs: &[(&str, &str)]| certificate_verification_on(&props(pairs));
    assert!(on(&[]));
    for off in ["false", "FALSE", "f", "F", "0", " false "] {
        assert!(
            !on(&[("enable.ssl.certificate.verification", off)]),
            "{off:?}"
        );
    }
    for value in ["true", "True", "t", "1"] {
        assert!(
            on(&[("enable.ssl.certificate.verification", value)]),
            "{value:?}"
        );
    }
    assert!(on(&[
        ("enable.ssl.certificate.verification", "false"),
        ("enable.ssl.certificate.verification", "true"),
    ]));
}

/// The stuck-producer probe: a fresh client sees the cluster answer, or
/// not when its only broker is down.
#[test]
fn the_cluster_probe_tells_a_reachable_cluster_from_a_down_one() {
    use rdkafka::mocking::MockCluster;
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("t", 2, 1).unwrap();
    let mut properties = props(&[]);
    properties[0].1 = mock.bootstrap_servers();
    assert!(cluster_answers(&properties, Duration::from_secs(5)));
    mock.broker_down(1).unwrap();
    assert!(!cluster_answers(&properties, Duration::from_millis(500)));
}
