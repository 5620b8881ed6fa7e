//! A certificate's subject as Kafka prints it for `ssl.principal.mapping.rules`: Java's
//! `X500Principal.getName()`, RFC 2253's string form.
//!
//! - The relative distinguished names in reverse of the certificate's order (the most
//!   specific first), separated by `,`; the attributes of one joined by `+`, in its order.
//! - An attribute is `TYPE=value`. The type is RFC 2253's keyword where it has one (CN, C, L,
//!   ST, O, OU, STREET, DC, UID), else its object identifier in dotted form.
//! - A value of a keyword's type that is a string (UTF8String, PrintableString, IA5String,
//!   TeletexString, GeneralString, BMPString) is its text, with `,` `=` `+` `<` `>` `#` `;`
//!   `"` `\` escaped by a backslash, a NUL as `\00`, and leading and trailing spaces (and
//!   carriage returns) escaped by a backslash. Any other value is `#` and the hex (lower
//!   case) of its whole DER element, as for `1.2.840.113549.1.9.1=#1611…`, an email address.

use super::subject::{Attribute, COMMON_NAME, subject_names};

/// RFC 2253's keywords, by their types' encoded object identifiers.
const KEYWORDS: &[(&[u8], &str)] = &[
    (COMMON_NAME, "CN"),
    (&[0x55, 0x04, 0x06], "C"),
    (&[0x55, 0x04, 0x07], "L"),
    (&[0x55, 0x04, 0x08], "ST"),
    (&[0x55, 0x04, 0x0a], "O"),
    (&[0x55, 0x04, 0x0b], "OU"),
    (&[0x55, 0x04, 0x09], "STREET"),
    // 0.9.2342.19200300.100.1.25 and .1: domainComponent, userId.
    (
        &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19],
        "DC",
    ),
    (
        &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01],
        "UID",
    ),
];

/// What RFC 2253 escapes with a backslash wherever it appears in a value.
const ESCAPED: &[char] = &[',', '=', '+', '<', '>', '#', ';', '"', '\\'];

/// The subject of the certificate `der` as Kafka's principal mapping reads it; `None` for
/// bytes that break DER's rule on the way to it.
pub(crate) fn distinguished_name(der: &[u8]) -> Option<String> {
    let names = subject_names(der)?;
    let printed: Vec<String> = names
        .iter()
        .rev()
        .map(|rdn| rdn.iter().map(attribute).collect::<Vec<_>>().join("+"))
        .collect();
    Some(printed.join(","))
}

/// One attribute, `TYPE=value`.
fn attribute(a: &Attribute<'_>) -> String {
    let keyword = KEYWORDS.iter().find(|(oid, _)| *oid == a.oid).map(|k| k.1);
    let kind = keyword.map_or_else(|| dotted(a.oid), str::to_string);
    match keyword.and(text(a.tag, a.contents)) {
        Some(text) => format!("{kind}={}", escape(&text)),
        None => {
            let hex: String = a.element.iter().map(|b| format!("{b:02x}")).collect();
            format!("{kind}=#{hex}")
        }
    }
}

/// A string value's text, for the string types Java reads as text.
fn text(tag: u8, contents: &[u8]) -> Option<String> {
    match tag {
        // UTF8String, PrintableString, IA5String.
        0x0c | 0x13 | 0x16 => String::from_utf8(contents.to_vec()).ok(),
        // TeletexString, GeneralString: one byte a character.
        0x14 | 0x1b => Some(contents.iter().map(|b| char::from(*b)).collect()),
        // BMPString: UTF-16, big-endian.
        0x1e if contents.len().is_multiple_of(2) => {
            let units = contents
                .chunks_exact(2)
                .map(|pair| pair.iter().fold(0, |unit, b| (unit << 8) | u16::from(*b)));
            char::decode_utf16(units)
                .collect::<Result<String, _>>()
                .ok()
        }
        _ => None,
    }
}

/// `value` escaped as RFC 2253 (and Java) escape it.
fn escape(value: &str) -> String {
    let mut chars = Vec::with_capacity(value.len());
    for c in value.chars() {
        if ESCAPED.contains(&c) {
            chars.extend(['\\', c]);
        } else if c == '\0' {
            chars.extend(['\\', '0', '0']);
        } else {
            chars.push(c);
        }
    }
    let blank = |c: &char| matches!(c, ' ' | '\r');
    let lead = chars.iter().take_while(|c| blank(c)).count();
    let trail = chars.iter().rev().take_while(|c| blank(c)).count();
    let mut out = String::with_capacity(chars.len() + lead + trail);
    for (i, c) in chars.iter().enumerate() {
        if i < lead || i >= chars.len().saturating_sub(trail) {
            out.push('\\');
        }
        out.push(*c);
    }
    out
}

/// An object identifier's contents in dotted form (`2.5.4.3`).
fn dotted(oid: &[u8]) -> String {
    let mut arcs: Vec<u128> = Vec::new();
    let mut arc: u128 = 0;
    for b in oid {
        arc = arc.saturating_mul(128).saturating_add(u128::from(b & 0x7f));
        if b & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (arc / 40).min(2);
                arcs.extend([first, arc - first * 40]);
            } else {
                arcs.push(arc);
            }
            arc = 0;
        }
    }
    let parts: Vec<String> = arcs.iter().map(u128::to_string).collect();
    parts.join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate whose subject is `names`, in the certificate's order.
    fn certificate(names: &[(rcgen::DnType, rcgen::DnValue)]) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (kind, value) in names {
            params.distinguished_name.push(kind.clone(), value.clone());
        }
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    fn utf8(text: &str) -> rcgen::DnValue {
        rcgen::DnValue::Utf8String(text.into())
    }

    #[test]
    fn the_subject_is_printed_most_specific_first_with_rfc_2253_keywords() {
        use rcgen::DnType;
        let der = certificate(&[
            (
                DnType::CountryName,
                rcgen::DnValue::PrintableString("US".try_into().unwrap()),
            ),
            (DnType::StateOrProvinceName, utf8("CA")),
            (DnType::LocalityName, utf8("Palo Alto")),
            (DnType::OrganizationName, utf8("Acme, Inc.")),
            (DnType::OrganizationalUnitName, utf8("ServiceUsers")),
            (DnType::CommonName, utf8("alice")),
        ]);
        assert_eq!(
            distinguished_name(&der).as_deref(),
            Some("CN=alice,OU=ServiceUsers,O=Acme\\, Inc.,L=Palo Alto,ST=CA,C=US")
        );
    }

    #[test]
    fn other_types_are_dotted_with_their_values_in_hex() {
        use rcgen::DnType;
        // emailAddress: 1.2.840.113549.1.9.1, an IA5String.
        let email = DnType::CustomDnType(vec![1, 2, 840, 113_549, 1, 9, 1]);
        let der = certificate(&[
            (email, rcgen::DnValue::Ia5String("a@b".try_into().unwrap())),
            (DnType::CommonName, utf8("bob")),
        ]);
        assert_eq!(
            distinguished_name(&der).as_deref(),
            Some("CN=bob,1.2.840.113549.1.9.1=#1603614062")
        );
    }

    #[test]
    fn values_are_escaped_as_rfc_2253_escapes_them() {
        assert_eq!(
            escape("a,b=c+d<e>f#g;h\"i\\j"),
            "a\\,b\\=c\\+d\\<e\\>f\\#g\\;h\\\"i\\\\j"
        );
        assert_eq!(escape("  x y "), "\\ \\ x y\\ ");
        assert_eq!(escape("nul\0"), "nul\\00");
        assert_eq!(escape(""), "");
        assert_eq!(escape("   "), "\\ \\ \\ ");
    }

    #[test]
    fn string_types_are_read_as_java_reads_them() {
        assert_eq!(text(0x1e, &[0x00, 0x41, 0x00, 0xe9]).as_deref(), Some("Aé"));
        assert_eq!(text(0x1e, &[0x00]), None);
        assert_eq!(text(0x14, &[0x41, 0xe9]).as_deref(), Some("Aé"));
        assert_eq!(text(0x0c, &[0xff]), None);
        assert_eq!(text(0x04, b"x"), None);
    }

    #[test]
    fn object_identifiers_are_dotted() {
        assert_eq!(dotted(&[0x55, 0x04, 0x03]), "2.5.4.3");
        assert_eq!(
            dotted(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01]),
            "1.2.840.113549.1.9.1"
        );
        assert_eq!(dotted(KEYWORDS[7].0), "0.9.2342.19200300.100.1.25");
        // Never a panic, whatever the bytes.
        let _ = (dotted(&[]), dotted(&[0xff; 40]), dotted(&[0x88, 0x37]));
    }

    #[test]
    fn truncated_or_garbled_certificates_give_no_name_and_never_panic() {
        let der = certificate(&[(rcgen::DnType::CommonName, utf8("alice"))]);
        for cut in 0..der.len() {
            assert_eq!(distinguished_name(&der[..cut]), None, "cut at {cut}");
        }
        for at in 0..der.len() {
            let mut garbled = der.clone();
            garbled[at] ^= 0xff;
            let _ = distinguished_name(&garbled);
        }
    }
}
