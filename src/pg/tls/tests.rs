use super::*;

#[test]
fn both_connections_get_the_same_options_and_verification() {
    for mode in [SslMode::Require, SslMode::VerifyCa, SslMode::VerifyFull] {
        let settings = TlsSettings {
            mode,
            ..TlsSettings::default()
        };
        let Ok(Some(connector)) = connector(&settings) else {
            panic!("no connector for {mode:?}");
        };
        let Ok(Some(replication)) = replication_context(&settings) else {
            panic!("no replication context for {mode:?}");
        };
        assert_eq!(
            SslConnector::builder(SslMethod::tls_client())
                .map(|b| b.options())
                .ok(),
            replication_base().map(|b| b.options()).ok(),
            "{mode:?}"
        );
        assert_eq!(
            connector.context().verify_mode(),
            replication.verify_mode(),
            "{mode:?}"
        );
    }
    assert!(replication_context(&TlsSettings::default()).is_ok());
}

#[test]
fn modes_mean_what_libpq_means() {
    use SslMode::*;
    let table = [
        (Disable, true, false, false),
        (Prefer, true, false, false),
        (Require, false, false, false),
        (VerifyCa, false, true, false),
        (VerifyFull, false, true, true),
    ];
    for (mode, plaintext, cert, host) in table {
        assert_eq!(mode.allows_plaintext(), plaintext, "{mode:?}");
        assert_eq!(mode.verifies_certificate(), cert, "{mode:?}");
        assert_eq!(mode.verifies_host_name(), host, "{mode:?}");
    }
    assert_eq!(SslMode::default(), Prefer);
}

#[test]
fn a_bad_root_cert_file_is_named() {
    let settings = |path: &str| TlsSettings {
        mode: SslMode::VerifyFull,
        root_cert: Some(PathBuf::from(path)),
        ..TlsSettings::default()
    };
    let missing = connector(&settings("/nonexistent/ca.pem")).unwrap_err();
    assert!(missing.message.contains("/nonexistent/ca.pem"), "{missing}");
    let dir = std::env::temp_dir().join(format!("walrelay-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let junk = dir.join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    let e = connector(&settings(junk.to_str().unwrap())).unwrap_err();
    assert!(e.message.contains("junk.pem"), "{e}");
    assert_eq!(e.key, Some("postgres.sslrootcert"), "names the key to fix");
    assert!(connector(&TlsSettings::default()).unwrap().is_some());
    assert!(
        connector(&TlsSettings {
            mode: SslMode::Disable,
            ..TlsSettings::default()
        })
        .unwrap()
        .is_none()
    );
}

/// An error's causes follow it, each once (a cause whose text the error
/// already shows is not repeated).
#[test]
fn error_chain_names_every_cause_once() {
    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);
    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }
    let e = E(
        "error performing TLS handshake",
        Some(Box::new(E(
            "TLS handshake",
            Some(Box::new(E("certificate verify failed", None))),
        ))),
    );
    assert_eq!(
        super::error_chain(&e),
        "error performing TLS handshake: certificate verify failed"
    );
    assert_eq!(super::error_chain(&E("alone", None)), "alone");
}
