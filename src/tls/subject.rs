//! What an X.509 certificate says of its holder, read from its DER bytes: its subject's
//! common name (CN), what a client certificate's principal is (`User:<CN>`, as Kafka's
//! `ssl.principal.mapping.rules` gives it with `RULE:^CN=([^,]+).*$/$1/`; Kafka's default rule
//! keeps the whole DN), and the DNS names of its subjectAltName, which name a peer broker
//! (`broker-<id>`).
//!
//! Only the paths to those are walked, by DER's tag-length-value rule:
//!
//! ```text
//! Certificate    ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signature }
//! TBSCertificate ::= SEQUENCE { [0] version OPTIONAL, serialNumber INTEGER,
//!                               signature SEQUENCE, issuer Name, validity SEQUENCE,
//!                               subject Name, subjectPublicKeyInfo SEQUENCE,
//!                               [1] issuerUniqueID OPTIONAL, [2] subjectUniqueID OPTIONAL,
//!                               [3] extensions SEQUENCE OF Extension OPTIONAL }
//! Name           ::= SEQUENCE OF SET OF SEQUENCE { type OBJECT IDENTIFIER, value ANY }
//! Extension      ::= SEQUENCE { extnID OBJECT IDENTIFIER, critical BOOLEAN DEFAULT FALSE,
//!                               extnValue OCTET STRING }
//! GeneralNames   ::= SEQUENCE OF GeneralName    -- subjectAltName's extnValue
//! ```
//!
//! The CN is the attribute of type 2.5.4.3 (`55 04 03`), a UTF8String, PrintableString or
//! IA5String; the last one where a subject has several (the most specific, as Kafka's rule
//! reads the name printed most specific first). The subjectAltName is the extension
//! 2.5.29.17 (`55 1d 11`); a dNSName is its GeneralName `[2]`, an IA5String (tag `82`).
//! Anything else, or bytes that break the rule, give nothing, never a panic.

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
const BOOLEAN: u8 = 0x01;
const OCTET_STRING: u8 = 0x04;
const VERSION: u8 = 0xa0;
const EXTENSIONS: u8 = 0xa3;
const DNS_NAME: u8 = 0x82;
pub(super) const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
const SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];

/// The serial number of the certificate `der`: its INTEGER's contents.
pub(super) fn serial_number(der: &[u8]) -> Option<&[u8]> {
    const INTEGER: u8 = 0x02;
    let (INTEGER, serial, _) = element(tbs_fields(der, 0)?)? else {
        return None;
    };
    Some(serial)
}

/// The TBSCertificate's fields of the certificate `der` from `skipped` fields after its
/// version on (serialNumber is the first).
fn tbs_fields(der: &[u8], skipped: usize) -> Option<&[u8]> {
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
    for _ in 0..skipped {
        tbs = element(tbs)?.2;
    }
    Some(tbs)
}

/// One attribute of a subject's name: its type and its value.
pub(super) struct Attribute<'a> {
    /// The type: an OBJECT IDENTIFIER's contents.
    pub(super) oid: &'a [u8],
    /// The value's tag.
    pub(super) tag: u8,
    /// The value's contents.
    pub(super) contents: &'a [u8],
    /// The value's whole DER element (tag, length, contents).
    pub(super) element: &'a [u8],
}

/// The subject's name of the certificate `der`: its relative distinguished names in the
/// certificate's order (the most general first), each its attributes.
pub(super) fn subject_names(der: &[u8]) -> Option<Vec<Vec<Attribute<'_>>>> {
    // serialNumber, signature, issuer, validity: skipped; then the subject.
    let (SEQUENCE, mut subject, _) = element(tbs_fields(der, 4)?)? else {
        return None;
    };
    let mut names = Vec::new();
    // Bounded by the subject's bytes: each step consumes at least two of them.
    while !subject.is_empty() {
        let (SET, mut set, rest) = element(subject)? else {
            return None;
        };
        subject = rest;
        let mut attributes = Vec::new();
        while !set.is_empty() {
            let (SEQUENCE, pair, rest) = element(set)? else {
                return None;
            };
            set = rest;
            let (OID, oid, value) = element(pair)? else {
                return None;
            };
            let (tag, contents, after) = element(value)?;
            let element = value.get(..value.len() - after.len())?;
            attributes.push(Attribute {
                oid,
                tag,
                contents,
                element,
            });
        }
        names.push(attributes);
    }
    Some(names)
}

/// The subject's common name of the certificate `der`, if it has one.
pub(crate) fn common_name(der: &[u8]) -> Option<String> {
    let names = subject_names(der)?;
    let last = names
        .iter()
        .flatten()
        .rev()
        // UTF8String, PrintableString, IA5String.
        .find(|a| {
            a.oid == COMMON_NAME && matches!(a.tag, 0x0c | 0x13 | 0x16) && !a.contents.is_empty()
        })?;
    Some(std::str::from_utf8(last.contents).ok()?.to_string())
}

/// The DNS names of the certificate `der`'s subjectAltName, in its order: none if it has
/// none, or its bytes break DER's rule on the way to them.
pub(crate) fn dns_names(der: &[u8]) -> Vec<String> {
    alt_dns_names(der).unwrap_or_default()
}

/// [`dns_names`], `None` for bytes that break the rule.
fn alt_dns_names(der: &[u8]) -> Option<Vec<String>> {
    // serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo: skipped;
    // then the optional fields, the extensions last.
    let mut fields = tbs_fields(der, 6)?;
    let mut extensions = None;
    while !fields.is_empty() {
        let (tag, contents, rest) = element(fields)?;
        if tag == EXTENSIONS {
            extensions = Some(contents);
        }
        fields = rest;
    }
    let mut names = Vec::new();
    let Some(extensions) = extensions else {
        return Some(names);
    };
    let (SEQUENCE, mut extensions, _) = element(extensions)? else {
        return None;
    };
    // Each step consumes at least two bytes of what it walks.
    while !extensions.is_empty() {
        let (SEQUENCE, extension, rest) = element(extensions)? else {
            return None;
        };
        extensions = rest;
        let (OID, oid, mut value) = element(extension)? else {
            return None;
        };
        if oid != SUBJECT_ALT_NAME {
            continue;
        }
        if let (BOOLEAN, _, rest) = element(value)? {
            value = rest;
        }
        let (OCTET_STRING, value, _) = element(value)? else {
            return None;
        };
        let (SEQUENCE, mut general_names, _) = element(value)? else {
            return None;
        };
        while !general_names.is_empty() {
            let (tag, name, rest) = element(general_names)?;
            general_names = rest;
            if tag == DNS_NAME && name.is_ascii() {
                names.push(std::str::from_utf8(name).ok()?.to_string());
            }
        }
    }
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(common_name: &str) -> Vec<u8> {
        with_names(common_name, &["localhost"])
    }

    /// A self-signed certificate of `common_name` whose SANs are `names` (IP addresses, or
    /// DNS names).
    fn with_names(common_name: &str, names: &[&str]) -> Vec<u8> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).unwrap();
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

    #[test]
    fn dns_names_are_read_from_the_subject_alt_name() {
        let der = with_names("x", &["localhost", "127.0.0.1", "broker-7", "::1"]);
        assert_eq!(dns_names(&der), ["localhost", "broker-7"]);
        assert!(dns_names(&with_names("x", &[])).is_empty());
        assert!(dns_names(&with_names("x", &["10.0.0.1"])).is_empty());
    }

    #[test]
    fn the_dev_certificates_name_their_broker() {
        use rustls_pki_types::CertificateDer;
        use rustls_pki_types::pem::PemObject;
        let dir = tempfile::tempdir().unwrap();
        let hosts = ["127.0.0.1".to_string(), "localhost".to_string()];
        crate::tls::DevCertificates::generate(&[1, 12], &hosts)
            .unwrap()
            .write_to(dir.path())
            .unwrap();
        let names = |file: &str| {
            let der = CertificateDer::from_pem_file(dir.path().join(file)).unwrap();
            dns_names(&der)
        };
        assert_eq!(names("broker-1.pem"), ["localhost", "broker-1"]);
        assert_eq!(names("broker-12.pem"), ["localhost", "broker-12"]);
        assert!(names("client.pem").is_empty());
        assert!(names("ca.pem").is_empty());
    }

    #[test]
    fn truncated_or_garbled_bytes_give_no_dns_names_and_never_panic() {
        let der = with_names("alice", &["localhost", "broker-3"]);
        for cut in 0..der.len() {
            assert!(dns_names(&der[..cut]).is_empty(), "cut at {cut}");
        }
        // Every byte flipped in turn, and bytes of a simple generator: anything, no panic.
        for at in 0..der.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut garbled = der.clone();
                garbled[at] ^= flip;
                let _ = (dns_names(&garbled), common_name(&garbled));
            }
        }
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for len in 0..2000 {
            let bytes: Vec<u8> = (0..len % 300)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 24) as u8
                })
                .collect();
            let mut framed = vec![0x30, 0x82];
            bytes::BufMut::put_u16(&mut framed, u16::try_from(bytes.len()).unwrap());
            framed.extend(&bytes);
            let _ = (dns_names(&bytes), dns_names(&framed));
        }
        assert!(dns_names(b"").is_empty());
        assert!(dns_names(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_empty());
    }
}
