//! Users and ACLs in the catalog: SCRAM credentials and ACL bindings, as every broker
//! applies them from the metadata log.

use super::super::*;

/// Users' SCRAM credentials: put (replacing the mechanism's), checked, deleted; the same on
/// every catalog that applies the same records.
#[test]
fn scram_credentials_are_put_checked_and_deleted() {
    use crate::security::{ScramCredential, ScramMechanism};
    let mut catalog = Catalog::with_configured(&[], &[1, 2, 3]);
    let sha512 = ScramCredential::with_salt(ScramMechanism::Sha512, "pw", b"salt", 4096).unwrap();
    let sha256 = ScramCredential::with_salt(ScramMechanism::Sha256, "pw", b"salt", 8192).unwrap();
    catalog.apply(0, Some(&sha512.put_command("alice")));
    catalog.apply(1, Some(&sha256.put_command("alice")));
    assert_eq!(catalog.outcome(1), Some(Ok(())));
    assert_eq!(
        catalog.scram_credential("alice", ScramMechanism::Sha512),
        Some(sha512.clone())
    );
    assert_eq!(catalog.scram_credentials("alice").len(), 2);
    assert_eq!(
        catalog.scram_credential("bob", ScramMechanism::Sha512),
        None
    );
    // A new password replaces the mechanism's credential.
    let changed =
        ScramCredential::with_salt(ScramMechanism::Sha512, "new", b"salt2", 4096).unwrap();
    catalog.apply(2, Some(&changed.put_command("alice")));
    assert_eq!(
        catalog.scram_credential("alice", ScramMechanism::Sha512),
        Some(changed)
    );
    // Refused: an unknown mechanism, iterations out of bounds, keys of the wrong length, no
    // name; the credentials stay as they were.
    let bad = |f: &dyn Fn(&mut MetaCommand)| {
        let mut c = sha512.put_command("mallory");
        f(&mut c);
        c
    };
    let refusals = [
        bad(&|c| {
            if let MetaCommand::PutScramCredential { mechanism, .. } = c {
                *mechanism = 3;
            }
        }),
        bad(&|c| {
            if let MetaCommand::PutScramCredential { iterations, .. } = c {
                *iterations = 100;
            }
        }),
        bad(&|c| {
            if let MetaCommand::PutScramCredential { stored_key, .. } = c {
                stored_key.pop();
            }
        }),
        bad(&|c| {
            if let MetaCommand::PutScramCredential { user, .. } = c {
                user.clear();
            }
        }),
    ];
    for (i, command) in refusals.iter().enumerate() {
        let offset = 3 + i as u64;
        catalog.apply(offset, Some(command));
        assert!(
            matches!(catalog.outcome(offset), Some(Err(Refused::Invalid(_)))),
            "{command:?}"
        );
    }
    assert!(catalog.scram_credentials("mallory").is_empty());
    let delete = |user: &str, mechanism| MetaCommand::DeleteScramCredential {
        user: user.into(),
        mechanism,
    };
    catalog.apply(10, Some(&delete("alice", 1)));
    assert_eq!(catalog.outcome(10), Some(Ok(())));
    assert_eq!(catalog.scram_credentials("alice").len(), 1);
    catalog.apply(11, Some(&delete("alice", 1)));
    assert!(matches!(
        catalog.outcome(11),
        Some(Err(Refused::Invalid(_)))
    ));
    catalog.apply(12, Some(&delete("alice", 2)));
    assert!(catalog.scram_credentials("alice").is_empty());
}

/// Topic `topic`, literally: `principal` may WRITE from any host.
pub(super) fn acl_record(topic: &str, principal: &str) -> AclRecord {
    AclRecord {
        resource_type: 2,
        resource_name: topic.into(),
        pattern_type: 3,
        principal: principal.into(),
        host: "*".into(),
        operation: 4,
        permission: 3,
    }
}

#[test]
fn acl_bindings_are_added_checked_and_removed() {
    use crate::security::acl::{AclBindingFilter, AclOperation, Requester, ResourceType};
    let mut catalog = Catalog::with_configured(&[], &[1]);
    let create = |acls| MetaCommand::CreateAcls { acls };
    let delete = |acls| MetaCommand::DeleteAcls { acls };
    let alice = acl_record("orders", "User:alice");
    catalog.apply(0, Some(&create(vec![alice.clone(), alice.clone()])));
    assert_eq!(catalog.outcome(0), Some(Ok(())));
    assert_eq!(catalog.acls().len(), 1);
    let who = Requester {
        principal: "User:alice",
        host: None,
    };
    let policy = Default::default();
    let decide = |c: &Catalog, op| {
        c.acls()
            .decide(&policy, &who, op, ResourceType::Topic, "orders")
    };
    assert!(decide(&catalog, AclOperation::Write));
    assert!(decide(&catalog, AclOperation::Describe));
    assert!(!decide(&catalog, AclOperation::Read));
    // One bad record refuses the whole command.
    let bad_codes = AclRecord {
        operation: 99,
        ..acl_record("payments", "User:bob")
    };
    let bad_principal = acl_record("payments", "bob");
    for (i, bad) in [bad_codes, bad_principal].into_iter().enumerate() {
        let offset = 1 + i as u64;
        let good = acl_record("payments", "User:carol");
        catalog.apply(offset, Some(&create(vec![good, bad])));
        assert!(
            matches!(catalog.outcome(offset), Some(Err(Refused::Invalid(_)))),
            "{i}"
        );
        assert_eq!(catalog.acls().len(), 1);
    }
    catalog.apply(
        3,
        Some(&delete(vec![alice.clone(), acl_record("x", "User:y")])),
    );
    assert_eq!(catalog.outcome(3), Some(Ok(())));
    assert!(catalog.acls().matching(&AclBindingFilter::any()).is_empty());
    assert!(!decide(&catalog, AclOperation::Write));
}
