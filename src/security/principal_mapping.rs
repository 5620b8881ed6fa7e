//! Kafka's `ssl.principal.mapping.rules`: how a client certificate's subject, printed as Kafka
//! prints it (`tls/dn.rs`), becomes the name of its principal (`User:<name>`).
//!
//! The rules are a comma-separated list, tried in order; the first that applies names the
//! principal:
//!
//! - `DEFAULT`: the whole subject (`CN=alice,OU=ServiceUsers,O=Acme`);
//! - `RULE:pattern/replacement/` (or ending `/L` or `/U`, which lower- or upper-case the
//!   result): applies where `pattern` matches the whole subject, which is then rewritten,
//!   each match of `pattern` by `replacement` (`$1` is the pattern's first group, `\x` the
//!   character `x`; `\/` writes a `/` in either part). A reference to a group the pattern does
//!   not have is kept as it is written.
//!
//! Kafka's own example, `RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT`, names the service
//! users by their CN and anybody else by the whole subject. A subject no rule applies to has
//! no principal: its connection is refused, as Kafka refuses it.
//!
//! The patterns are the `regex` crate's, which has no look-around and no backreferences
//! (Java's patterns do): such a pattern is refused when the rules are read.

use regex::{Captures, Regex};

use crate::error::{Error, Result};

/// Kafka's `ssl.principal.mapping.rules` (see [`NodeConfig::ssl_principal_mapping_rules`]):
/// how a client certificate's subject names its principal.
///
/// [`NodeConfig::ssl_principal_mapping_rules`]: crate::NodeConfig::ssl_principal_mapping_rules
#[derive(Clone, Debug)]
pub struct PrincipalMappingRules {
    /// As they were written.
    text: String,
    rules: Vec<Rule>,
}

impl PartialEq for PrincipalMappingRules {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for PrincipalMappingRules {}

impl std::fmt::Display for PrincipalMappingRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for PrincipalMappingRules {
    type Err = Error;

    fn from_str(text: &str) -> Result<PrincipalMappingRules> {
        PrincipalMappingRules::parse(text)
    }
}

/// One rule.
#[derive(Clone, Debug)]
enum Rule {
    /// The whole subject.
    Default,
    /// A rewrite, where `whole` matches.
    Rewrite {
        /// The pattern, anchored at both ends.
        whole: Regex,
        pattern: Regex,
        replacement: Vec<Piece>,
        case: Case,
    },
}

/// What a rewrite's result is turned into.
#[derive(Clone, Copy, Debug)]
enum Case {
    Kept,
    Lower,
    Upper,
}

/// A piece of a replacement.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Group(usize),
    Named(String),
}

/// A refusal of the rules, for `why`.
fn invalid(why: String) -> Error {
    Error::InvalidConfig {
        field: "ssl_principal_mapping_rules",
        reason: why,
    }
}

/// Java's `\s`.
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{b}' | '\u{c}' | '\r')
}

/// Where in `text` the first separator between rules starts (optional spaces, then a comma
/// or the end): the length of what comes before it.
fn before_separator(text: &str) -> usize {
    let ends_here = |at: usize| {
        let rest = text[at..].trim_start_matches(is_space);
        rest.is_empty() || rest.starts_with(',')
    };
    text.char_indices()
        .map(|(at, _)| at)
        .find(|at| ends_here(*at))
        .unwrap_or(text.len())
}

/// One part of a `RULE:`, up to its closing unescaped `/`: the part as written and what
/// follows the `/`; `None` if no `/` closes it.
fn rule_part(text: &str) -> Option<(&str, &str)> {
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next()?;
            }
            '/' => return Some((&text[..at], &text[at + 1..])),
            _ => {}
        }
    }
    None
}

impl PrincipalMappingRules {
    /// The rules written in `text`, as Kafka reads `ssl.principal.mapping.rules`; an empty
    /// rule between two commas is left out.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the rule that is neither `DEFAULT` nor a `RULE:`, or
    /// whose pattern does not compile, or whose replacement refers to a group the way Java
    /// refuses (`$` followed by neither a digit nor `{name}`).
    pub fn parse(text: &str) -> Result<PrincipalMappingRules> {
        let mut rules = Vec::new();
        let mut rest = text.trim();
        loop {
            rest = rest.trim_start_matches(is_space);
            if rest.is_empty() {
                break;
            }
            let end = before_separator(rest);
            let (rule, after) = if rest.starts_with("DEFAULT") && end == "DEFAULT".len() {
                (Some(Rule::Default), &rest[end..])
            } else if let Some((rule, after)) = Self::rewrite(rest)? {
                (Some(rule), after)
            } else if end == 0 {
                (None, rest)
            } else {
                return Err(invalid(format!("invalid rule `{}`", &rest[..end])));
            };
            rules.extend(rule);
            rest = after.trim_start_matches(is_space);
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
        Ok(PrincipalMappingRules {
            text: text.to_string(),
            rules,
        })
    }

    /// The `RULE:` `text` opens with, and what follows it; `None` if it opens with none.
    fn rewrite(text: &str) -> Result<Option<(Rule, &str)>> {
        let Some(body) = text.strip_prefix("RULE:") else {
            return Ok(None);
        };
        let Some((pattern, rest)) = rule_part(body) else {
            return Ok(None);
        };
        let Some((replacement, rest)) = rule_part(rest) else {
            return Ok(None);
        };
        let (case, rest) = match rest.chars().next() {
            Some('L') => (Case::Lower, &rest[1..]),
            Some('U') => (Case::Upper, &rest[1..]),
            _ => (Case::Kept, rest),
        };
        let end = before_separator(rest);
        let written = &text[..text.len() - rest.len() + end];
        if end > 0 {
            return Err(invalid(format!(
                "invalid rule `{written}`, unmatched substring `{}`",
                &rest[..end]
            )));
        }
        let compile = |source: &str| {
            Regex::new(source).map_err(|e| invalid(format!("rule `{written}`: {e}")))
        };
        let whole = compile(&format!("^(?:{pattern})$"))?;
        let pattern = compile(pattern)?;
        let groups = pattern.captures_len() - 1;
        let replacement = pieces(replacement, groups)
            .map_err(|why| invalid(format!("rule `{written}`: {why}")))?;
        let rule = Rule::Rewrite {
            whole,
            pattern,
            replacement,
            case,
        };
        Ok(Some((rule, &rest[end..])))
    }

    /// The name the first rule that applies gives the subject `distinguished_name`; `None`
    /// if none applies.
    pub fn map(&self, distinguished_name: &str) -> Option<String> {
        self.rules
            .iter()
            .find_map(|rule| rule.apply(distinguished_name))
    }
}

impl Rule {
    /// The name this rule gives `dn`, if it applies.
    fn apply(&self, dn: &str) -> Option<String> {
        let Rule::Rewrite {
            whole,
            pattern,
            replacement,
            case,
        } = self
        else {
            return Some(dn.to_string());
        };
        if !whole.is_match(dn) {
            return None;
        }
        let rewritten = pattern.replace_all(dn, |captures: &Captures<'_>| {
            let mut out = String::new();
            for piece in replacement {
                match piece {
                    Piece::Text(text) => out.push_str(text),
                    Piece::Group(i) => out.push_str(captures.get(*i).map_or("", |m| m.as_str())),
                    Piece::Named(name) => {
                        out.push_str(captures.name(name).map_or("", |m| m.as_str()));
                    }
                }
            }
            out
        });
        Some(match case {
            Case::Kept => rewritten.into_owned(),
            Case::Lower => rewritten.to_lowercase(),
            Case::Upper => rewritten.to_uppercase(),
        })
    }
}

/// A replacement as Java's `replaceAll` reads it, for a pattern of `groups` groups: `\x` is
/// `x`; `$` and digits the longest group number they begin that the pattern has (Kafka keeps
/// a reference to a group it does not have as written); `${name}` a named group.
fn pieces(replacement: &str, groups: usize) -> std::result::Result<Vec<Piece>, String> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut chars = replacement.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => text.extend(chars.next()),
            '$' => {
                let first = chars.peek().copied();
                let group = match first {
                    Some('{') => {
                        chars.next();
                        let mut name = String::new();
                        loop {
                            match chars.next() {
                                Some('}') => break,
                                Some(c) => name.push(c),
                                None => return Err("`${` is not closed by `}`".into()),
                            }
                        }
                        Piece::Named(name)
                    }
                    Some(d) if d.is_ascii_digit() => {
                        let mut number = d.to_digit(10).map_or(0, |d| d as usize);
                        if number > groups {
                            text.push('$');
                            continue;
                        }
                        chars.next();
                        while let Some(next) = chars.peek().and_then(|c| c.to_digit(10)) {
                            let longer = number.saturating_mul(10).saturating_add(next as usize);
                            if longer > groups {
                                break;
                            }
                            number = longer;
                            chars.next();
                        }
                        Piece::Group(number)
                    }
                    _ => return Err("`$` must be followed by a group's number or {name}".into()),
                };
                out.push(Piece::Text(std::mem::take(&mut text)));
                out.push(group);
            }
            c => text.push(c),
        }
    }
    out.push(Piece::Text(text));
    out.retain(|p| *p != Piece::Text(String::new()));
    Ok(out)
}

#[cfg(test)]
mod tests;
