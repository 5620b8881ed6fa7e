//! The rules as Kafka's own tests of `SslPrincipalMapper` read and apply them.

use super::*;

/// The rules of `text`, each as `DEFAULT` or `RULE:pattern/replacement[/L|/U]`.
fn split(text: &str) -> Vec<String> {
    let rules = PrincipalMappingRules::parse(text).unwrap();
    rules
        .rules
        .iter()
        .map(|rule| match rule {
            Rule::Default => "DEFAULT".to_string(),
            Rule::Rewrite {
                pattern,
                replacement,
                case,
                ..
            } => {
                let replacement: String = replacement
                    .iter()
                    .map(|p| match p {
                        Piece::Text(t) => t.clone(),
                        Piece::Group(i) => format!("${i}"),
                        Piece::Named(n) => format!("${{{n}}}"),
                    })
                    .collect();
                let case = match case {
                    Case::Kept => "",
                    Case::Lower => "/L",
                    Case::Upper => "/U",
                };
                format!("RULE:{pattern}/{replacement}{case}")
            }
        })
        .collect()
}

#[test]
fn rules_are_split_where_kafka_splits_them() {
    let cases: &[(&str, &[&str])] = &[
        ("", &[]),
        ("DEFAULT", &["DEFAULT"]),
        ("RULE://", &["RULE:/"]),
        ("RULE:/.*/", &["RULE:/.*"]),
        ("RULE:/.*/L", &["RULE:/.*/L"]),
        ("RULE://,DEFAULT", &["RULE:/", "DEFAULT"]),
        ("  RULE:// ,  DEFAULT  ", &["RULE:/", "DEFAULT"]),
        (
            "  RULE:   /     / , DEFAULT  ",
            &["RULE:   /     ", "DEFAULT"],
        ),
        (
            "  RULE:  /     /U   ,DEFAULT  ",
            &["RULE:  /     /U", "DEFAULT"],
        ),
        (
            "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
            &["RULE:([A-Z]*)/$1/U", "RULE:([a-z]+)/$1", "DEFAULT"],
        ),
        // Empty rules are left out.
        (",   , , ,      , , ,   ", &[]),
        (",,RULE://,,,DEFAULT,,", &["RULE:/", "DEFAULT"]),
        (
            ",  , RULE: /   /    ,,,   DEFAULT, ,   ",
            &["RULE: /   ", "DEFAULT"],
        ),
        // A comma inside a pattern is the pattern's.
        (
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
            &["RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L", "DEFAULT"],
        ),
        // Escaped slashes.
        (r"RULE:\/\\\/\///,DEFAULT", &[r"RULE:\/\\\/\//", "DEFAULT"]),
    ];
    for (text, want) in cases {
        assert_eq!(split(text), *want, "{text:?}");
    }
}

#[test]
fn what_kafka_refuses_is_refused() {
    for text in [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
        "DEFAULT, nonsense",
        // Java refuses these replacements; the regex crate these patterns.
        "RULE:^(.*)$/$x/",
        "RULE:^(.*)$/${name/",
        "RULE:^(?=CN).*$/x/",
        "RULE:^(a)\\1$/x/",
    ] {
        match PrincipalMappingRules::parse(text) {
            Err(Error::InvalidConfig { field, reason }) => {
                assert_eq!(field, "ssl_principal_mapping_rules");
                assert!(reason.contains("rule"), "{text:?}: {reason}");
            }
            other => panic!("{text:?}: {other:?}"),
        }
    }
    for text in [
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ] {
        assert!(PrincipalMappingRules::parse(text).is_ok(), "{text:?}");
    }
}

#[test]
fn the_first_rule_that_applies_names_the_principal() {
    let rules: PrincipalMappingRules = [
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]
    .join(", ")
    .parse()
    .unwrap();
    let cases = [
        ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "duke"),
        ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
        ("cn=duke,ou=sme,dc=mycp,dc=com", "DUKE@SME"),
        ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
        (
            "OU=JavaSoft,O=Sun Microsystems,C=US",
            "OU=JavaSoft,O=Sun Microsystems,C=US",
        ),
    ];
    for (dn, name) in cases {
        assert_eq!(rules.map(dn).as_deref(), Some(name), "{dn}");
    }
    let escaped =
        PrincipalMappingRules::parse(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT").unwrap();
    assert_eq!(
        escaped
            .map(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz")
            .as_deref(),
        Some(r"Tkac\, Adam")
    );
}

#[test]
fn a_subject_no_rule_applies_to_has_no_name() {
    let rules = PrincipalMappingRules::parse("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/").unwrap();
    assert_eq!(rules.map("CN=alice,OU=Staff"), None);
    assert_eq!(PrincipalMappingRules::parse("").unwrap().map("CN=a"), None);
}

#[test]
fn group_references_are_read_as_java_and_kafka_read_them() {
    let one = |replacement: &str| pieces(replacement, 1).unwrap();
    let text = |t: &str| Piece::Text(t.into());
    // A group the pattern does not have is kept as written.
    assert_eq!(one("$1$2x"), [Piece::Group(1), text("$2x")]);
    // The longest number that names a group.
    assert_eq!(one("$12"), [Piece::Group(1), text("2")]);
    assert_eq!(pieces("$12", 12).unwrap(), [Piece::Group(12)]);
    assert_eq!(one("$0"), [Piece::Group(0)]);
    assert_eq!(one(r"\$1 \\ \/"), [text(r"$1 \ /")]);
    assert_eq!(one("${user}@x"), [Piece::Named("user".into()), text("@x")]);
    let rules = PrincipalMappingRules::parse("RULE:^CN=(?P<user>[a-z]+).*$/${user}$1$9/").unwrap();
    assert_eq!(rules.map("CN=alice,O=x").as_deref(), Some("alicealice$9"));
}

#[test]
fn rules_compare_and_print_as_written() {
    let text = "RULE:^CN=(.*?),.*$/$1/L, DEFAULT";
    let rules = PrincipalMappingRules::parse(text).unwrap();
    assert_eq!(rules.to_string(), text);
    assert_eq!(rules, text.parse().unwrap());
}
