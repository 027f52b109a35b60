use super::*;

#[test]
fn ordinary_conditions_pass() {
    for ok in [
        "id IN ('a', 'b')",
        "created_at >= to_timestamp(1764547200123 / 1000.0) - interval '10 minutes'",
        "payload->>'kind' = 'x)''; --' AND (a OR (b))",
        "\"Weird)Name\" = 1",
        "name LIKE 'a\\_b'",
        "note = E'it\\'s ) -- fine'",
        "note = E'\\') union select 1 --'",
        "payload @? '$.items[*] ? (@.qty > 1)'",
        "id IN (SELECT id FROM outbox WHERE aggregatetype = 'order')",
    ] {
        assert_eq!(check(ok), Ok(()), "{ok}");
    }
}

#[test]
fn conditions_that_could_leave_their_parentheses_are_refused() {
    for (bad, why) in [
        ("true) UNION SELECT * FROM secrets --", "closes more"),
        (
            "true) UNION SELECT * FROM secrets WHERE (true",
            "closes more",
        ),
        ("1=1; DROP TABLE outbox", "';'"),
        ("id = 1 -- ) union", "comments"),
        ("id = 1 /* ) */", "comments"),
        ("id = $$)$$", "'$'"),
        ("id = 'open", "string literal is not closed"),
        ("\"open = 1", "quoted identifier is not closed"),
        ("(id = 1", "not closed"),
        ("id = '\\') UNION SELECT 1 --'", "closes more"),
        ("  ", "empty"),
    ] {
        let e = check(bad).expect_err(bad);
        assert!(e.contains(why), "{bad}: {e}");
    }
    // `e'` after an identifier byte is not an E-string: `date'x'` style.
    assert_eq!(check("somee'\\' = 'x'"), Ok(()));
}
