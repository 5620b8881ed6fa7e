//! The record layer against itself: every format sealed and opened, damage refused.

use super::*;

fn secrets(byte: u8, chacha: bool) -> ConnectionTrafficSecrets {
    let iv = rustls::crypto::cipher::Iv::new([byte ^ 0x5a; 12]);
    if chacha {
        ConnectionTrafficSecrets::Chacha20Poly1305 {
            key: [byte; 32].into(),
            iv,
        }
    } else {
        let key: rustls::crypto::cipher::AeadKey = [byte; 32].into();
        ConnectionTrafficSecrets::Aes256Gcm { key, iv }
    }
}

/// Two ends of one connection: what `a` seals `b` opens.
fn pair(tls13: bool, chacha: bool) -> (Records, Records) {
    let a = Records::new(
        tls13,
        (0, secrets(1, chacha)),
        (0, secrets(2, chacha)),
        1 << 20,
    );
    let b = Records::new(
        tls13,
        (0, secrets(2, chacha)),
        (0, secrets(1, chacha)),
        1 << 20,
    );
    (a.unwrap(), b.unwrap())
}

const FORMATS: [(bool, bool); 3] = [(true, false), (false, false), (false, true)];

#[test]
fn what_one_end_seals_the_other_opens_in_every_format() {
    for (tls13, chacha) in FORMATS {
        let (mut a, mut b) = pair(tls13, chacha);
        let mut out = RecordBuf::default();
        let contents: Vec<Vec<u8>> = [0usize, 1, 1000, MAX_CONTENT]
            .iter()
            .map(|&n| (0..n).map(|i| (i % 251) as u8).collect())
            .collect();
        // Each content sealed where it was copied, then from where it lies.
        for c in &contents {
            a.seal(APPLICATION_DATA, &mut out, |out| out.extend_from_slice(c))
                .unwrap();
            a.seal_slice(APPLICATION_DATA, &mut out, c).unwrap();
        }
        let wire = out.bytes().to_vec();
        // Opened in place by one end, into a buffer of just the room it needs by another.
        let (_, mut c) = pair(tls13, chacha);
        let (mut in_place, mut at) = (wire.clone(), 0);
        for content in contents.iter().flat_map(|c| [c, c]) {
            let len = b.record_len(&wire[at..]).unwrap().unwrap();
            let (typ, range) = b.open(&mut in_place[at..at + len]).unwrap();
            assert_eq!(typ, APPLICATION_DATA);
            let what = format!("tls13 {tls13} chacha {chacha}");
            assert_eq!(&in_place[at..at + len][range], &content[..], "{what}");
            let mut into = vec![0xee; c.opened_room(len)];
            let (typ, n) = c.open_into(&wire[at..at + len], &mut into).unwrap();
            assert_eq!(
                (typ, &into[..n]),
                (APPLICATION_DATA, &content[..]),
                "{what}"
            );
            at += len;
        }
        assert_eq!(at, wire.len());
    }
}

#[test]
fn a_record_sealed_where_its_content_lies_is_the_record_sealed_in_place() {
    for (tls13, chacha) in FORMATS {
        for (len, typ) in [(0usize, ALERT), (1, HANDSHAKE), (4096, APPLICATION_DATA)] {
            let content = pattern(len);
            let (mut a, _) = pair(tls13, chacha);
            let (mut same, _) = pair(tls13, chacha);
            let (mut copied, mut lying) = (RecordBuf::default(), RecordBuf::default());
            // Room left by an earlier, longer record: the new one must overwrite it.
            lying.extend_from_slice(&[0xee; MAX_CONTENT]);
            lying.clear();
            for _ in 0..2 {
                a.seal(typ, &mut copied, |out| out.extend_from_slice(&content))
                    .unwrap();
                same.seal_slice(typ, &mut lying, &content).unwrap();
            }
            assert_eq!(
                copied.bytes(),
                lying.bytes(),
                "tls13 {tls13} chacha {chacha} len {len}"
            );
        }
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[test]
fn a_changed_byte_a_replayed_record_or_a_lying_header_is_refused() {
    for (tls13, chacha) in FORMATS {
        let (mut a, mut b) = pair(tls13, chacha);
        let mut out = RecordBuf::default();
        a.seal(APPLICATION_DATA, &mut out, |out| {
            out.extend_from_slice(b"hello")
        })
        .unwrap();
        let wire = out.bytes().to_vec();
        // Every byte of the record, changed, fails it as the stream reads it (header
        // checked, then opened): header (TLS 1.3 authenticates it whole; TLS 1.2 its type
        // and length, not the minor version), nonce, ciphertext, tag.
        // Opened in place and into another buffer.
        for (i, into) in (0..wire.len())
            .filter(|&i| tls13 || i != 2)
            .flat_map(|i| [(i, false), (i, true)])
        {
            let mut copy = wire.clone();
            copy[i] ^= 0x40;
            let (_, mut fresh) = pair(tls13, chacha);
            let outcome = match fresh.record_len(&copy) {
                Some(Ok(len)) if len == copy.len() && into => {
                    let mut out = vec![0; fresh.opened_room(len)];
                    fresh.open_into(&copy, &mut out).map(|_| ())
                }
                Some(Ok(len)) if len == copy.len() => fresh.open(&mut copy).map(|_| ()),
                Some(Ok(_)) => Err(RecordError::Truncated),
                Some(Err(e)) => Err(e),
                None => Err(RecordError::Truncated),
            };
            assert!(
                outcome.is_err(),
                "byte {i} changed went through (into: {into})"
            );
        }
        // Opened once, the same record again is out of sequence.
        b.open(&mut wire.clone()).unwrap();
        assert!(matches!(
            b.open(&mut wire.clone()),
            Err(RecordError::BadMac)
        ));
        // Headers no record has.
        assert!(matches!(
            b.record_len(&[APPLICATION_DATA, 3, 3, 0xff, 0xff]),
            Some(Err(RecordError::Oversized(_)))
        ));
        assert!(matches!(
            b.record_len(&[20, 3, 3, 0, 1]),
            Some(Err(RecordError::UnexpectedType(20)))
        ));
        assert!(matches!(
            b.record_len(&[APPLICATION_DATA, 2, 0, 0, 1]),
            Some(Err(RecordError::BadVersion(0x0200)))
        ));
        assert!(b.record_len(&[APPLICATION_DATA, 3]).is_none());
        assert!(matches!(
            b.open(&mut [APPLICATION_DATA, 3, 3, 0, 3, 1, 2, 3]),
            Err(RecordError::Truncated)
        ));
    }
}

#[test]
fn tls13_padding_is_stripped_and_an_inner_plaintext_over_the_limit_is_refused() {
    // Sealed by hand: content, type, then zeros.
    let seal_padded = |a: &mut Records, content: &[u8], padding: usize| {
        let mut inner = content.to_vec();
        inner.push(APPLICATION_DATA);
        inner.resize(inner.len() + padding, 0);
        let len = (inner.len() + TAG_LEN) as u16;
        let header = [APPLICATION_DATA, 3, 3, (len >> 8) as u8, len as u8];
        let nonce = Nonce::assume_unique_for_key(a.tx.nonce_bytes());
        a.tx.key
            .seal_in_place_append_tag(nonce, Aad::from(header), &mut inner)
            .unwrap();
        a.tx.seq += 1;
        let mut record = header.to_vec();
        record.extend_from_slice(&inner);
        record
    };
    let (mut a, mut b) = pair(true, false);
    let (_, mut c) = pair(true, false);
    let mut record = seal_padded(&mut a, b"hi", 200);
    let mut into = vec![0; c.opened_room(record.len())];
    assert_eq!(into.len(), 2 + 1 + 200);
    let (typ, n) = c.open_into(&record, &mut into).unwrap();
    assert_eq!((typ, &into[..n]), (APPLICATION_DATA, &b"hi"[..]));
    let (typ, range) = b.open(&mut record).unwrap();
    assert_eq!((typ, &record[range]), (APPLICATION_DATA, &b"hi"[..]));
    let mut record = seal_padded(&mut a, &[1u8; MAX_CONTENT], 1);
    let mut into = vec![0; c.opened_room(record.len())];
    assert!(matches!(
        c.open_into(&record, &mut into),
        Err(RecordError::Oversized(_))
    ));
    assert!(matches!(
        b.open(&mut record),
        Err(RecordError::Oversized(_))
    ));
    // Too little room to open into is refused, not a panic.
    let record = seal_padded(&mut a, b"hi", 0);
    assert!(matches!(
        c.open_into(&record, &mut [0; 2]),
        Err(RecordError::NoRoom(3))
    ));
    let mut record = seal_padded(&mut a, &[], 0);
    record[HEADER_LEN..].fill(0);
    assert!(b.open(&mut record).is_err());
}

#[test]
fn content_over_a_record_is_refused_and_leaves_the_buffer_as_it_was() {
    let (mut a, _) = pair(true, false);
    let mut out = RecordBuf::default();
    out.extend_from_slice(&[9u8; 3]);
    let refused = a.seal(APPLICATION_DATA, &mut out, |o| o.grow(MAX_CONTENT + 1));
    assert!(matches!(refused, Err(RecordError::Oversized(_))));
    assert_eq!(out.bytes(), &[9u8; 3]);
    let refused = a.seal_slice(APPLICATION_DATA, &mut out, &[1u8; MAX_CONTENT + 1]);
    assert!(matches!(refused, Err(RecordError::Oversized(_))));
    assert_eq!(out.bytes(), &[9u8; 3]);
}

#[test]
fn tls13_hides_the_type_and_tls12_with_used_up_keys_seals_nothing() {
    let (mut a, mut b) = pair(true, false);
    let mut out = RecordBuf::default();
    a.seal(HANDSHAKE, &mut out, |o| {
        o.extend_from_slice(&[24, 0, 0, 1, 0])
    })
    .unwrap();
    let mut wire = out.bytes().to_vec();
    assert_eq!(wire[0], APPLICATION_DATA);
    let (typ, range) = b.open(&mut wire).unwrap();
    assert_eq!((typ, &wire[range]), (HANDSHAKE, &[24u8, 0, 0, 1, 0][..]));

    let mut a = Records::new(false, (0, secrets(1, false)), (0, secrets(2, false)), 2).unwrap();
    let mut out = RecordBuf::default();
    for _ in 0..2 {
        a.seal(APPLICATION_DATA, &mut out, |o| o.push(1)).unwrap();
    }
    assert!(a.needs_new_keys());
    assert!(matches!(
        a.seal(APPLICATION_DATA, &mut out, |o| o.push(1)),
        Err(RecordError::KeysUsedUp)
    ));
    assert!(matches!(
        a.seal_slice(APPLICATION_DATA, &mut out, &[1]),
        Err(RecordError::KeysUsedUp)
    ));
}

use proptest::prelude::*;

proptest! {
    #[test]
    fn any_content_and_type_sealed_by_one_end_opens_as_sent_at_the_other(
        format in 0usize..3,
        records in proptest::collection::vec(
            (prop_oneof![Just(ALERT), Just(HANDSHAKE), Just(APPLICATION_DATA)],
             proptest::collection::vec(any::<u8>(), 0..2000),
             any::<bool>()),
            1..8,
        ),
        taken in 0usize..4000,
    ) {
        let (tls13, chacha) = FORMATS[format];
        let (mut a, mut b) = pair(tls13, chacha);
        let mut out = RecordBuf::default();
        let mut wire = Vec::new();
        for (typ, content, where_it_lies) in &records {
            if *where_it_lies {
                a.seal_slice(*typ, &mut out, content).unwrap();
            } else {
                a.seal(*typ, &mut out, |out| out.extend_from_slice(content)).unwrap();
            }
            // The socket takes some; the rest moves to the front, and the room behind
            // it holds old bytes the next record must overwrite.
            let n = taken.min(out.len());
            wire.extend_from_slice(&out.bytes()[..n]);
            out.consume(n);
        }
        wire.extend_from_slice(out.bytes());
        // Opened into another buffer by a second end, and in place.
        let (_, mut c) = pair(tls13, chacha);
        let mut at = 0;
        for (typ, content, _) in &records {
            let len = b.record_len(&wire[at..]).unwrap().unwrap();
            let mut into = vec![0; c.opened_room(len)];
            let (opened, n) = c.open_into(&wire[at..at + len], &mut into).unwrap();
            prop_assert_eq!((opened, &into[..n]), (*typ, &content[..]));
            let (opened, range) = b.open(&mut wire[at..at + len]).unwrap();
            prop_assert_eq!(opened, *typ);
            prop_assert_eq!(&wire[at..at + len][range], &content[..]);
            at += len;
        }
    }

    #[test]
    fn any_bytes_read_as_records_are_refused_without_a_panic(
        format in 0usize..3,
        bytes in proptest::collection::vec(any::<u8>(), 0..4096),
    ) {
        let (tls13, chacha) = FORMATS[format];
        let (_, mut b) = pair(tls13, chacha);
        let mut bytes = bytes;
        let mut at = 0;
        // Bounded: each turn consumes a whole record or stops.
        while let Some(Ok(len)) = b.record_len(&bytes[at..]) {
            if bytes.len() - at < len {
                break;
            }
            let mut into = vec![0; b.opened_room(len)];
            prop_assert!(b.open_into(&bytes[at..at + len], &mut into).is_err());
            prop_assert!(b.open(&mut bytes[at..at + len]).is_err());
            at += len;
        }
    }
}
