//! The subject's common name (CN) of an X.509 certificate, read from its DER bytes: what a
//! client certificate's principal is (`User:<CN>`, as Kafka's `ssl.principal.mapping.rules`
//! gives it with `RULE:^CN=([^,]+).*$/$1/`; Kafka's default rule keeps the whole DN).
//!
//! Only the path to the subject is walked, by DER's tag-length-value rule:
//!
//! ```text
//! Certificate    ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signature }
//! TBSCertificate ::= SEQUENCE { [0] version OPTIONAL, serialNumber INTEGER,
//!                               signature SEQUENCE, issuer Name, validity SEQUENCE,
//!                               subject Name, ... }
//! Name           ::= SEQUENCE OF SET OF SEQUENCE { type OBJECT IDENTIFIER, value ANY }
//! ```
//!
//! The CN is the attribute of type 2.5.4.3 (`55 04 03`), a UTF8String, PrintableString or
//! IA5String; the last one where a subject has several (the most specific, as Kafka's rule
//! reads the name printed most specific first). Anything else, or bytes that break the rule,
//! give `None`, never a panic.

/// One DER element: its tag, its contents, and what follows it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (bytes, rest) = rest.split_at(n);
        let len = bytes
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, rest)
    };
    if rest.len() < len {
        return None;
    }
    let (contents, after) = rest.split_at(len);
    Some((tag, contents, after))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const VERSION: u8 = 0xa0;
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];

/// The subject's common name of the certificate `der`, if it has one.
pub(crate) fn common_name(der: &[u8]) -> Option<String> {
    let (SEQUENCE, certificate, _) = element(der)? else {
        return None;
    };
    let (SEQUENCE, mut tbs, _) = element(certificate)? else {
        return None;
    };
    let (tag, _, rest) = element(tbs)?;
    if tag == VERSION {
        tbs = rest;
    }
    // serialNumber, signature, issuer, validity: skipped; then the subject.
    for _ in 0..4 {
        tbs = element(tbs)?.2;
    }
    let (SEQUENCE, mut subject, _) = element(tbs)? else {
        return None;
    };
    let mut found = None;
    // Bounded by the subject's bytes: each step consumes at least two of them.
    while !subject.is_empty() {
        let (SET, mut set, rest) = element(subject)? else {
            return None;
        };
        subject = rest;
        while !set.is_empty() {
            let (SEQUENCE, pair, rest) = element(set)? else {
                return None;
            };
            set = rest;
            let (OID, oid, value) = element(pair)? else {
                return None;
            };
            if oid == COMMON_NAME {
                let (tag, text, _) = element(value)?;
                // UTF8String, PrintableString, IA5String.
                if matches!(tag, 0x0c | 0x13 | 0x16) && !text.is_empty() {
                    found = Some(std::str::from_utf8(text).ok()?.to_string());
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(common_name: &str) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "replog");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, common_name);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn the_common_name_is_read_from_the_subject() {
        assert_eq!(common_name(&certificate("alice")).as_deref(), Some("alice"));
        assert_eq!(
            common_name(&certificate("Ünïcode user")).as_deref(),
            Some("Ünïcode user")
        );
    }

    #[test]
    fn truncated_or_foreign_bytes_give_no_name() {
        let der = certificate("alice");
        for cut in 0..der.len() {
            // Never a panic; a cut inside the subject or before it gives no name.
            let _ = common_name(&der[..cut]);
        }
        assert_eq!(common_name(&der[..40]), None);
        assert_eq!(common_name(b""), None);
        assert_eq!(common_name(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
    }
}
