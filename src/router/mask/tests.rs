use super::*;

fn mask(config: ColumnMask, oid: Oid, typmod: i32) -> Mask {
    Mask::new(&config, oid, typmod).unwrap_or(Mask::Chars(0))
}

fn hash(algorithm: &str, salt: &str, version: u8) -> ColumnMask {
    ColumnMask {
        columns: vec!["c".into()],
        hash: Some(algorithm.into()),
        salt: Some(SecretString::from(salt)),
        hash_version: Some(version),
        with_chars: None,
        truncate_to_chars: None,
    }
}

fn written(m: &Mask, v: Option<&str>) -> String {
    let mut out = Vec::new();
    m.write(&mut out, v, &mut Vec::new()).unwrap_or_default();
    String::from_utf8(out).unwrap_or_default()
}

#[test]
fn java_serialization_of_strings() {
    let mut out = Vec::new();
    java_serialize_string(&mut out, "ab");
    assert_eq!(out, [0xac, 0xed, 0, 5, 0x74, 0, 2, b'a', b'b']);
    out.clear();
    // é (2 bytes), NUL (2 bytes, modified UTF-8), 😀 (two 3-byte surrogates).
    java_serialize_string(&mut out, "é\0😀");
    assert_eq!(
        out,
        [
            0xac, 0xed, 0, 5, 0x74, 0, 10, 0xc3, 0xa9, 0xc0, 0x80, 0xed, 0xa0, 0xbd, 0xed, 0xb8,
            0x80
        ]
    );
    out.clear();
    let long = "x".repeat(70_000);
    java_serialize_string(&mut out, &long);
    assert_eq!(
        &out[..13],
        [0xac, 0xed, 0, 5, 0x7c, 0, 0, 0, 0, 0, 1, 0x11, 0x70]
    );
    assert_eq!(out.len(), 13 + 70_000);
}

/// Expected values computed with Java 17 running Debezium's
/// `HashValueConverter` steps (MessageDigest, update(salt),
/// digest(ObjectOutputStream bytes or getBytes()), `%02x`).
#[test]
fn hashes_match_java() {
    let v1 = mask(hash("SHA-256", "CzQMA0cB5K", 1), 25, -1);
    assert_eq!(
        written(&v1, Some("Ann Smith")),
        format!("\"{}\"", JAVA_V1_SHA256)
    );
    let v2 = mask(hash("sha-256", "CzQMA0cB5K", 2), 25, -1);
    assert_eq!(
        written(&v2, Some("Ann Smith")),
        format!("\"{}\"", JAVA_V2_SHA256)
    );
    let unicode = mask(hash("SHA-256", "CzQMA0cB5K", 1), 25, -1);
    assert_eq!(
        written(&unicode, Some("Zoë 😀")),
        format!("\"{}\"", JAVA_V1_SHA256_UNICODE)
    );
    // varchar(10): the hex is cut to the column's length.
    let short = mask(hash("SHA-256", "CzQMA0cB5K", 1), 1043, 14);
    assert_eq!(
        written(&short, Some("Ann Smith")),
        format!("\"{}\"", &JAVA_V1_SHA256[..10])
    );
    assert_eq!(written(&v1, None), "null");
    let md5 = mask(hash("MD5", "s", 2), 25, -1);
    assert_eq!(written(&md5, Some("a")), format!("\"{}\"", JAVA_V2_MD5));
}

const JAVA_V1_SHA256: &str = "bb9b86ba11ee5278eabf42b0bfbaa8b0d42a77cbf5503b9123767f850f9269a3";
const JAVA_V2_SHA256: &str = "a08b0af3514f132a6f94588c18553e67e7550b9677099f4d32143e328790b749";
const JAVA_V1_SHA256_UNICODE: &str =
    "b9b1b4f375032b32ffa79dddf692159ab869d6bfbe664a1483c9874ba3214ecb";
const JAVA_V2_MD5: &str = "c12e01f2a13ff5587e1e9e4aedb8242d";

#[test]
fn fixed_masks_replace_every_value_null_included() {
    let m = Mask::Chars(5);
    assert_eq!(written(&m, Some("secret")), "\"*****\"");
    assert_eq!(written(&m, None), "\"*****\"");
    assert_eq!(written(&Mask::Chars(0), Some("x")), "\"\"");
}

#[test]
fn truncation_counts_utf16_units() {
    let m = Mask::Truncate(3);
    assert_eq!(written(&m, Some("abcdef")), "\"abc\"");
    assert_eq!(written(&m, Some("ab")), "\"ab\"");
    assert_eq!(written(&m, None), "null");
    assert_eq!(truncate_utf16("aé😀b", 3), "aé");
    assert_eq!(truncate_utf16("aé😀b", 4), "aé😀");
    assert_eq!(written(&m, Some("a\"b\\c")), "\"a\\\"b\"");
}

#[test]
fn only_text_like_types_are_maskable() {
    for oid in [25, 1043, 1042, 18, 19] {
        assert!(maskable(oid), "{oid}");
    }
    for oid in [23, 20, 2950, 114, 3802, 1009, 17, 1184] {
        assert!(!maskable(oid), "{oid}");
    }
}

#[test]
fn the_salt_never_reaches_debug() {
    let m = mask(hash("SHA-256", "very-secret-salt", 1), 25, -1);
    assert!(!format!("{m:?}").contains("very-secret-salt"));
    let c = hash("SHA-256", "very-secret-salt", 1);
    assert!(!format!("{c:?}").contains("very-secret-salt"));
}
