//! SCRAM against RFC 7677's exchange, a SHA-512 exchange computed with Python's `hashlib`, a
//! client written from the RFC, and every malformed message that matters.

use super::*;

/// A client's side, from RFC 5802, for the tests: (client-final, expected server-final).
fn client_final(
    mechanism: ScramMechanism,
    password: &str,
    client_first_bare: &str,
    server_first: &str,
    gs2_header: &str,
) -> (String, String) {
    let attr = |key: &str| {
        server_first
            .split(',')
            .find_map(|a| a.strip_prefix(key))
            .unwrap()
            .to_string()
    };
    let salt = BASE64.decode(attr("s=")).unwrap();
    let iterations: u32 = attr("i=").parse().unwrap();
    let salted = mechanism.salted_password(password.as_bytes(), &salt, iterations);
    let client_key = mechanism.hmac(&salted, b"Client Key");
    let stored = mechanism.hash(&client_key);
    let without_proof = format!(
        "c={},r={}",
        BASE64.encode(gs2_header.as_bytes()),
        attr("r=")
    );
    let auth = format!("{client_first_bare},{server_first},{without_proof}");
    let signature = mechanism.hmac(&stored, auth.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&signature)
        .map(|(a, b)| a ^ b)
        .collect();
    let server_key = mechanism.hmac(&salted, b"Server Key");
    let server_signature = mechanism.hmac(&server_key, auth.as_bytes());
    (
        format!("{without_proof},p={}", BASE64.encode(proof)),
        format!("v={}", BASE64.encode(server_signature)),
    )
}

fn fake() -> FakeCredentials {
    FakeCredentials { secret: [9; 32] }
}

fn credential(mechanism: ScramMechanism, password: &str) -> ScramCredential {
    ScramCredential::with_salt(mechanism, password, b"0123456789abcdef", 4096).unwrap()
}

/// One whole exchange: the user's name and the server-final message, or where it failed.
fn exchange(
    mechanism: ScramMechanism,
    stored: Option<ScramCredential>,
    user: &str,
    password: &str,
) -> Result<(String, String), SaslError> {
    let bare = format!("n={},r=clientnonce", escape_name(user));
    let mut server = ScramServer::new(mechanism);
    let first = server.first(format!("n,,{bare}").as_bytes(), "srv", |_| stored, &fake())?;
    let first = String::from_utf8(first).unwrap();
    let (last, expected) = client_final(mechanism, password, &bare, &first, "n,,");
    let (name, answer) = server.finish(last.as_bytes())?;
    assert_eq!(
        String::from_utf8(answer).unwrap(),
        expected,
        "server signature"
    );
    Ok((name, expected))
}

/// RFC 7677 §3, byte for byte: the server answers the RFC's server-first and server-final
/// messages when given the RFC's salt, iterations and nonce.
#[test]
fn scram_sha_256_matches_rfc_7677() {
    let m = ScramMechanism::Sha256;
    let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
    let stored = ScramCredential::with_salt(m, "pencil", &salt, 4096).unwrap();
    assert_eq!(
        BASE64.encode(&stored.stored_key),
        "WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY="
    );
    assert_eq!(
        BASE64.encode(&stored.server_key),
        "wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="
    );
    let mut server = ScramServer::new(m);
    let first = server
        .first(
            b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
            |u| (u == "user").then(|| stored.clone()),
            &fake(),
        )
        .unwrap();
    assert_eq!(
        first,
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    );
    let (user, last) = server
        .finish(
            b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
              p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        )
        .unwrap();
    assert_eq!(user, "user");
    assert_eq!(last, b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
}

/// SCRAM-SHA-512 (no RFC vector): keys and messages computed independently with Python's
/// `hashlib.pbkdf2_hmac` and `hmac` for the same inputs.
#[test]
fn scram_sha_512_matches_an_independent_computation() {
    let m = ScramMechanism::Sha512;
    let stored =
        ScramCredential::with_salt(m, "wonderland", b"0123456789abcdef0123456789abcdef", 4096)
            .unwrap();
    assert_eq!(
        BASE64.encode(&stored.stored_key),
        "5WXrsxrIrZbpOzD8abygspul2/t9n79pjHk0gMqylOif0g3m5n5IV2ITxrN4p8y6qI8E+dMpmchqkUZx+lwbnA=="
    );
    let mut server = ScramServer::new(m);
    let first = server
        .first(
            b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL",
            "3rfcNHYJY1ZVvWVs7j",
            |_| Some(stored.clone()),
            &fake(),
        )
        .unwrap();
    assert_eq!(
        first,
        b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,\
          s=MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=,i=4096"
    );
    let (_, last) = server
        .finish(
            b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,\
              p=SBY3rxqKMzrVczM+AYcKpvtyx1TLzeCguhrr+vU9apuhfoYP2MsxSYEXZwoeHVomsUkU9wRG6Yb0ijU6/l762Q==",
        )
        .unwrap();
    assert_eq!(
        last,
        b"v=wcnt9KidF8DHVmMI1ArLCxpseXywa8eyc3WxwVzg+rsLa8gIIDt/NPLijFk4DxhA23mGN1On+MjOvluh00ER/g=="
            .as_slice()
    );
}

#[test]
fn both_mechanisms_accept_the_right_password_and_refuse_a_wrong_one() {
    for m in ScramMechanism::ALL {
        let stored = credential(m, "secret");
        assert_eq!(
            exchange(m, Some(stored.clone()), "alice", "secret")
                .unwrap()
                .0,
            "alice"
        );
        assert_eq!(
            exchange(m, Some(stored), "alice", "Secret"),
            Err(SaslError::Failed),
            "{m:?}"
        );
        // A credential of the other mechanism does not log in with this one.
        let other = credential(
            ScramMechanism::ALL.into_iter().find(|o| *o != m).unwrap(),
            "secret",
        );
        assert_eq!(
            exchange(m, Some(other), "alice", "secret"),
            Err(SaslError::Failed)
        );
    }
}

/// An unknown user is answered as a known one (a salt and the default iteration count, the
/// same on every attempt) and fails only at the proof, as a wrong password does.
#[test]
fn an_unknown_user_looks_like_a_wrong_password() {
    let m = ScramMechanism::Sha512;
    let first = |user: &str| {
        let mut server = ScramServer::new(m);
        let msg = format!("n,,n={user},r=abc");
        String::from_utf8(
            server
                .first(msg.as_bytes(), "xyz", |_| None, &fake())
                .unwrap(),
        )
        .unwrap()
    };
    let a = first("mallory");
    assert_eq!(a, first("mallory"), "the same salt on every attempt");
    assert_ne!(a, first("eve"), "a salt per name");
    assert!(a.ends_with(",i=4096"));
    let salt = a.split(',').find_map(|x| x.strip_prefix("s=")).unwrap();
    assert_eq!(
        BASE64.decode(salt).unwrap().len(),
        SALT_LEN,
        "as long as a real salt"
    );
    assert_eq!(
        exchange(m, None, "mallory", "guess"),
        Err(SaslError::Failed)
    );
}

#[test]
fn names_are_escaped_as_kafka_escapes_them() {
    let m = ScramMechanism::Sha256;
    let stored = credential(m, "pw");
    assert_eq!(exchange(m, Some(stored), "a,b=c", "pw").unwrap().0, "a,b=c");
    assert_eq!(unescape_name("a=2Cb=3D").unwrap(), "a,b=");
    for bad in ["a=b", "a=2", "=", "a\0b", ""] {
        assert!(unescape_name(bad).is_err(), "{bad:?}");
    }
}

/// Every malformed or refused first message is a typed error, never a panic.
#[test]
fn bad_first_messages_are_refused() {
    let cases: &[(&[u8], SaslError)] = &[
        (b"", SaslError::Malformed("no GS2 header")),
        (b"n,,", SaslError::Malformed("no user name")),
        (b"n,,n=u", SaslError::Malformed("no client nonce")),
        (b"n,,n=u,r=", SaslError::Malformed("no client nonce")),
        (b"n,,n=u,r=a b", SaslError::Malformed("no client nonce")),
        (
            b"x,,n=u,r=n",
            SaslError::Malformed("GS2 channel-binding flag"),
        ),
        (b"p=tls-unique,,n=u,r=n", SaslError::ChannelBinding),
        (b"n,a=v,n=u,r=n", SaslError::AuthorizationId),
        (
            b"n,z=u,n=u,r=n",
            SaslError::Malformed("GS2 authorization id"),
        ),
        (b"n,,n=u,r=n,tokenauth=true", SaslError::TokenAuth),
        (b"n,,n=u,r=n,noequals", SaslError::Malformed("extension")),
        (b"n,,n=u=,r=n", SaslError::Malformed("user name escape")),
        (b"n,,n=\xff,r=n", SaslError::Malformed("UTF-8")),
    ];
    for (message, error) in cases {
        let mut server = ScramServer::new(ScramMechanism::Sha256);
        assert_eq!(
            server
                .first(message, "s", |_| None, &fake())
                .as_ref()
                .map(|_| ()),
            Err(error),
            "{}",
            String::from_utf8_lossy(message)
        );
        // A failed first message ends the exchange.
        assert_eq!(
            server.finish(b"c=biws,r=ns,p=AA=="),
            Err(SaslError::IllegalState)
        );
    }
    // An authorization id that is the user's own, and unknown extensions, are fine.
    let mut server = ScramServer::new(ScramMechanism::Sha256);
    assert!(
        server
            .first(b"y,a=u,n=u,r=n,foo=bar", "s", |_| None, &fake())
            .is_ok()
    );
}

/// Every malformed or wrong final message is a typed error, and ends the exchange.
#[test]
fn bad_final_messages_are_refused() {
    let m = ScramMechanism::Sha256;
    let stored = credential(m, "pw");
    let bare = "n=u,r=cn";
    let start = || {
        let mut server = ScramServer::new(m);
        let first = server
            .first(
                format!("n,,{bare}").as_bytes(),
                "sn",
                |_| Some(stored.clone()),
                &fake(),
            )
            .unwrap();
        (server, String::from_utf8(first).unwrap())
    };
    let (_, first) = start();
    let (good, _) = client_final(m, "pw", bare, &first, "n,,");
    let truncated = &good[..good.len() - 8];
    let cases: Vec<(String, SaslError)> = vec![
        (String::new(), SaslError::Malformed("no proof")),
        (
            "c=biws,r=cnsn,p=***".into(),
            SaslError::Malformed("proof is not base64"),
        ),
        (
            "r=cnsn,p=AA==".into(),
            SaslError::Malformed("no channel binding"),
        ),
        ("c=biws,p=AA==".into(), SaslError::Malformed("no nonce")),
        ("c=eSws,r=cnsn,p=AA==".into(), SaslError::ChannelBinding),
        ("c=biws,r=cnXX,p=AA==".into(), SaslError::NonceMismatch),
        ("c=biws,r=cnsnX,p=AA==".into(), SaslError::NonceMismatch),
        ("c=biws,r=cnsn,p=AA==".into(), SaslError::Failed),
        (truncated.to_string(), SaslError::Failed),
        (
            good.replace(",p=", ",x,p="),
            SaslError::Malformed("extension"),
        ),
    ];
    for (message, error) in cases {
        let (mut server, _) = start();
        assert_eq!(
            server.finish(message.as_bytes()).map(|_| ()),
            Err(error),
            "{message}"
        );
        assert_eq!(
            server.finish(good.as_bytes()).map(|_| ()),
            Err(SaslError::IllegalState)
        );
    }
    let (mut server, _) = start();
    assert!(server.finish(good.as_bytes()).is_ok());
    assert_eq!(
        server
            .first(b"n,,n=u,r=x", "s", |_| None, &fake())
            .map(|_| ()),
        Err(SaslError::IllegalState),
        "one exchange per server"
    );
}

#[test]
fn credentials_check_their_iterations_and_salt() {
    let m = ScramMechanism::Sha256;
    for bad in [0, 4095, 16385] {
        assert!(matches!(
            ScramCredential::with_salt(m, "p", b"s", bad),
            Err(SaslError::Iterations { .. })
        ));
    }
    assert!(ScramCredential::with_salt(m, "p", b"", 4096).is_err());
    assert!(ScramCredential::from_salted_password(m, &[0; 31], b"s", 4096).is_err());
    // A salted password (Kafka's AlterUserScramCredentials) gives the same keys as the password.
    let salted = m.salted_password(b"p", b"s", 4096);
    assert_eq!(
        ScramCredential::from_salted_password(m, &salted, b"s", 4096).unwrap(),
        ScramCredential::with_salt(m, "p", b"s", 4096).unwrap()
    );
    let drawn = ScramCredential::new(m, "p", 4096).unwrap();
    assert!(drawn.verifies_password("p") && !drawn.verifies_password("q"));
    assert_ne!(
        drawn.salt,
        ScramCredential::new(m, "p", 4096).unwrap().salt,
        "a salt each"
    );
    assert!(
        !format!("{drawn:?}").contains("stored_key"),
        "keys stay out of logs"
    );
    assert_eq!(
        ScramMechanism::from_name("SCRAM-SHA-512"),
        Some(ScramMechanism::Sha512)
    );
    assert_eq!(
        ScramMechanism::from_kafka_type(1),
        Some(ScramMechanism::Sha256)
    );
    assert_eq!(ScramMechanism::from_name("scram-sha-512"), None);
}

#[test]
fn the_fuzz_entry_runs_a_whole_exchange() {
    assert!(!fuzz_sasl_server(b""));
    assert!(!fuzz_sasl_server(
        b"n,,n=user,r=x\xffc=biws,r=xservernonce,p=AA=="
    ));
}

/// librdkafka (2.0) sends its client nonce again before the agreed nonce in its final
/// message, which Kafka takes (it checks that the nonce ends with the agreed one): so does
/// this server, and the proof is over what was sent.
#[test]
fn a_final_nonce_that_repeats_the_clients_is_taken_as_kafka_takes_it() {
    let m = ScramMechanism::Sha256;
    let stored = credential(m, "pw");
    let bare = "n=u,r=cn";
    let mut server = ScramServer::new(m);
    let first = server
        .first(
            format!("n,,{bare}").as_bytes(),
            "sn",
            |_| Some(stored.clone()),
            &fake(),
        )
        .unwrap();
    let first = String::from_utf8(first).unwrap();
    // The client's final message as librdkafka writes it: r=<cnonce><cnonce><snonce>.
    let salted = m.salted_password(b"pw", b"0123456789abcdef", 4096);
    let client_key = m.hmac(&salted, b"Client Key");
    let without_proof = "c=biws,r=cncnsn";
    let auth = format!("{bare},{first},{without_proof}");
    let signature = m.hmac(&m.hash(&client_key), auth.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&signature)
        .map(|(a, b)| a ^ b)
        .collect();
    let last = format!("{without_proof},p={}", BASE64.encode(proof));
    assert_eq!(server.finish(last.as_bytes()).unwrap().0, "u");
}
