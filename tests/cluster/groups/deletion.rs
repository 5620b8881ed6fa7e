//! Deleting groups and committed offsets: refused while the group has a member (or, for an
//! offset, while its members read the topic), done once it has none, through the client and
//! the CLI; and what was deleted stays deleted after the coordinator's failover and after
//! every broker restarts (the next coordinator reads the deletion from the offsets topic).

use super::*;

/// The group's state as its coordinator describes it, with its committed offsets.
async fn group_of(client: &Client, group: &str) -> (String, BTreeMap<(String, u32), Offset>) {
    let state = client.describe_group(group).await.unwrap().state;
    (state, client.committed_offsets(group).await.unwrap())
}

/// The deleted group, the group that lost one offset, the group never touched: as they
/// must read after the deletions, from whichever coordinator answers.
async fn check_deleted(client: &Client, what: &str) {
    let (state, offsets) = group_of(client, "gone").await;
    assert_eq!(state, "Dead", "{what}: the deleted group");
    assert!(offsets.is_empty(), "{what}: its offsets went with it");
    let listed: Vec<String> = client
        .list_groups()
        .await
        .unwrap()
        .into_iter()
        .map(|g| g.group)
        .collect();
    assert!(!listed.contains(&"gone".to_string()), "{what}: {listed:?}");
    let (_, offsets) = group_of(client, "trimmed").await;
    assert_eq!(
        offsets.into_iter().collect::<Vec<_>>(),
        vec![((TOPIC.to_string(), 1), Offset(11))],
        "{what}: the offset deleted stays deleted"
    );
    let refused = client.delete_group("gone").await;
    assert!(
        matches!(
            refused,
            Err(Error::Group {
                error: GroupError::GroupIdNotFound,
                ..
            })
        ),
        "{what}: {refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_groups_and_offsets_stay_deleted_after_failover_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = crate::local_cluster(3, dir.path(), TOPIC, 2, |_| {}).await;
    let client = Arc::new(
        Client::connect(&cluster.addrs(), ClientConfig::default())
            .await
            .unwrap(),
    );
    let offsets = |a: u64, b: u64| {
        vec![
            (TOPIC.to_string(), 0, Some(Offset(a))),
            (TOPIC.to_string(), 1, Some(Offset(b))),
        ]
    };
    // Records below the offsets committed: a consumer starts there.
    for p in 0..2 {
        let batch: Vec<Record> = (0..20).map(|i| Record::new(format!("{p}-{i}"))).collect();
        client.send(TOPIC, p, &batch).await.unwrap();
    }
    for group in ["gone", "trimmed"] {
        client
            .reset_group_offsets(group, &offsets(10, 11))
            .await
            .unwrap();
    }

    // A member in the group: neither the group nor its offsets of the topic it reads go.
    let mut member = Consumer::new(Arc::clone(&client), group_config("gone"));
    member.subscribe(&[TOPIC]).unwrap();
    joined(&mut member).await;
    let refused = client.delete_group("gone").await;
    assert!(
        matches!(
            refused,
            Err(Error::Group {
                error: GroupError::NonEmptyGroup,
                ..
            })
        ),
        "{refused:?}"
    );
    let results = client
        .delete_group_offsets("gone", &[(TOPIC.to_string(), 0)])
        .await
        .unwrap();
    assert_eq!(
        results,
        vec![(
            (TOPIC.to_string(), 0),
            Some(GroupError::GroupSubscribedToTopic)
        )]
    );
    assert_eq!(group_of(&client, "gone").await.1.len(), 2);
    member.close().await.unwrap();
    client.delete_group("gone").await.unwrap();
    let results = client
        .delete_group_offsets(
            "trimmed",
            &[(TOPIC.to_string(), 0), ("no.such.topic".to_string(), 0)],
        )
        .await
        .unwrap();
    assert_eq!(
        results,
        vec![
            ((TOPIC.to_string(), 0), None),
            (
                ("no.such.topic".to_string(), 0),
                Some(GroupError::UnknownTopicOrPartition)
            ),
        ]
    );
    check_deleted(&client, "deleted").await;

    // The coordinator's broker goes: the next coordinator reads the deletions back.
    let coordinator = client.group_coordinator("gone").await.unwrap();
    let id = broker_at(&cluster, &coordinator);
    cluster.stop(id).await.unwrap();
    let survivors: Vec<SocketAddr> = cluster
        .addrs()
        .into_iter()
        .filter(|a| coordinator != *a)
        .collect();
    let client = Client::connect(&survivors, ClientConfig::default())
        .await
        .unwrap();
    assert_ne!(client.group_coordinator("gone").await.unwrap(), coordinator);
    check_deleted(&client, "after the coordinator's failover").await;

    // Every broker restarts: whoever coordinates reads them back from disk.
    let ids: Vec<replog::NodeId> = cluster.nodes().map(|n| n.id()).collect();
    for id in &ids {
        cluster.stop(*id).await.unwrap();
    }
    for id in ids.iter().chain([&id]) {
        cluster.restart(*id).await.unwrap();
    }
    let client = Client::connect(&cluster.addrs(), ClientConfig::default())
        .await
        .unwrap();
    check_deleted(&client, "after every broker restarted").await;
    // A group of the same name is a new group.
    client
        .reset_group_offsets("gone", &offsets(3, 4))
        .await
        .unwrap();
    assert_eq!(group_of(&client, "gone").await.1.len(), 2);
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// `replog groups --delete --group G` deletes a group without members, and says why it
/// cannot delete one with a member; `--delete-offsets` deletes a topic's offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_deletes_groups_and_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = crate::local_cluster(1, dir.path(), TOPIC, 2, |_| {}).await;
    let client = Arc::new(
        Client::connect(&cluster.addrs(), ClientConfig::default())
            .await
            .unwrap(),
    );
    // A record below the offset committed: a consumer starts there.
    let records = [Record::new("a"), Record::new("b")];
    client.send(TOPIC, 0, &records).await.unwrap();
    for group in ["idle", "busy", "offsets"] {
        let all = [(TOPIC.to_string(), 0, Some(Offset(1)))];
        client.reset_group_offsets(group, &all).await.unwrap();
    }
    let mut member = Consumer::new(Arc::clone(&client), group_config("busy"));
    member.subscribe(&[TOPIC]).unwrap();
    joined(&mut member).await;
    let server = cluster.addrs()[0].to_string();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "groups".to_string(),
            "--bootstrap-server".into(),
            server.clone(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            crate::cli(&args, "")
        })
    };
    let (ok, out, err) = run(&["--delete", "--group", "idle"]).await.unwrap();
    assert!(ok, "{err}");
    assert_eq!(
        out,
        "Deletion of requested consumer groups ('idle') was successful.\n"
    );
    let (ok, _, err) = run(&["--delete", "--group", "busy"]).await.unwrap();
    assert!(!ok);
    assert!(err.contains("has live members"), "{err}");
    let (ok, out, err) = run(&["--delete-offsets", "--group", "offsets", "--topic", TOPIC])
        .await
        .unwrap();
    assert!(ok, "{err}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["TOPIC", "PARTITION", "STATUS"],
            vec![TOPIC, "0", "Successful"],
            vec![TOPIC, "1", "Successful"],
        ]
    );
    let (ok, out, _) = run(&["--list"]).await.unwrap();
    assert!(ok);
    assert_eq!(out, "busy\n", "the group left without offsets went too");
    member.close().await.unwrap();
    drop(client);
    cluster.shutdown().await.unwrap();
}
