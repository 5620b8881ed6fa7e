//! Unit tests of `catalog.rs`.

use super::*;

mod security;
use security::acl_record;

/// Blocks of producer ids never overlap, whichever broker takes them, start at 1, and
/// refuse what cannot be given; a replay of the same commands gives the same blocks.
#[test]
fn producer_id_blocks_never_overlap_and_replay_alike() {
    let commands: Vec<MetaCommand> = [(1, 1000), (2, 1), (1, 1000), (3, 5), (9, 10), (2, 0)]
        .into_iter()
        .map(|(broker, count)| MetaCommand::AllocateProducerIds {
            broker,
            count,
            tag: count + broker,
        })
        .collect();
    let replay = || {
        let mut catalog = Catalog::with_configured(&[], &[1, 2, 3]);
        let mut blocks = Vec::new();
        for (offset, command) in commands.iter().enumerate() {
            catalog.apply(offset as u64, Some(command));
            let MetaCommand::AllocateProducerIds { broker, .. } = command else {
                unreachable!()
            };
            let outcome = catalog.outcome(offset as u64).unwrap();
            blocks.push(outcome.map(|()| catalog.producer_block(*broker).unwrap().ids));
        }
        blocks
    };
    let blocks = replay();
    assert_eq!(blocks, replay());
    let given: Vec<_> = blocks.iter().filter_map(|b| b.clone().ok()).collect();
    assert_eq!(given, [1..1001, 1001..1002, 1002..2002, 2002..2007]);
    // Broker 9 is not in the cluster; a block of none is no block.
    assert!(blocks[4].is_err() && blocks[5].is_err());
    let mut catalog = Catalog::with_configured(&[], &[1]);
    catalog.next_producer_id = PRODUCER_IDS_END - 10;
    let command = MetaCommand::AllocateProducerIds {
        broker: 1,
        count: 11,
        tag: 0,
    };
    catalog.apply(0, Some(&command));
    assert!(catalog.outcome(0).unwrap().is_err(), "past 2^63: spent");
}

/// A topic name as long as a replica directory holds whole still makes file names that fit
/// (names of 245 to 249 bytes once passed 255 bytes in their deletion names; they are
/// shortened now, `node/replica_dir.rs`); Kafka's 249 bytes are taken, 250 are not.
#[test]
fn the_longest_topic_name_still_makes_file_names_that_fit() {
    let longest = "t".repeat(DIR_TOPIC_BYTES_MAX);
    check_topic_name(&longest).unwrap();
    let deleted = format!("{longest}-{}.{}-delete", PARTITIONS_MAX - 1, u64::MAX);
    assert!(deleted.len() <= FILE_NAME_BYTES_MAX, "{}", deleted.len());
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(&deleted)).unwrap();
    assert_eq!(TOPIC_NAME_BYTES_MAX, 249);
    check_topic_name(&"t".repeat(TOPIC_NAME_BYTES_MAX)).unwrap();
    let err = check_topic_name(&"t".repeat(TOPIC_NAME_BYTES_MAX + 1)).unwrap_err();
    assert!(err.contains(&TOPIC_NAME_BYTES_MAX.to_string()), "{err}");
}

/// FORMAT.md §6.2: a metadata record's value is the command in postcard. The variant order
/// and the field order are the format: pinned here, byte by byte.
#[test]
fn metadata_commands_are_pinned_byte_by_byte() {
    let bytes = |c: &MetaCommand| postcard::to_stdvec(c).unwrap();
    let cases: Vec<(MetaCommand, Vec<u8>)> = vec![
        (
            MetaCommand::CreateTopic {
                name: "t".into(),
                assignment: vec![vec![1, 2], vec![300]],
            },
            vec![0, 1, b't', 2, 2, 1, 2, 1, 0xAC, 0x02],
        ),
        (
            MetaCommand::DeleteTopic { name: "ab".into() },
            vec![1, 2, b'a', b'b'],
        ),
        (
            MetaCommand::RegisterBroker {
                id: 4,
                addr: "h:1".into(),
                join: true,
            },
            vec![2, 4, 3, b'h', b':', b'1', 1],
        ),
        (
            MetaCommand::ReassignPartition {
                name: "t".into(),
                partition: 2,
                replicas: vec![3],
            },
            vec![3, 1, b't', 2, 1, 3],
        ),
        (
            MetaCommand::ReassignDone {
                topic_id: 129,
                partition: 0,
                replicas: vec![],
            },
            vec![4, 0x81, 0x01, 0, 0],
        ),
        (
            MetaCommand::RegisterKafka {
                id: 2,
                addr: "h:9".into(),
            },
            vec![5, 2, 3, b'h', b':', b'9'],
        ),
        (
            MetaCommand::AllocateProducerIds {
                broker: 3,
                count: 1000,
                tag: 1,
            },
            vec![6, 3, 0xE8, 0x07, 1],
        ),
        (
            MetaCommand::PutScramCredential {
                user: "u".into(),
                mechanism: 2,
                salt: vec![1],
                iterations: 4096,
                stored_key: vec![9],
                server_key: vec![8],
            },
            vec![7, 1, b'u', 2, 1, 1, 0x80, 0x20, 1, 9, 1, 8],
        ),
        (
            MetaCommand::DeleteScramCredential {
                user: "u".into(),
                mechanism: 1,
            },
            vec![8, 1, b'u', 1],
        ),
        (
            MetaCommand::CreateAcls {
                acls: vec![acl_record("t", "U:a")],
            },
            vec![9, 1, 2, 1, b't', 3, 3, b'U', b':', b'a', 1, b'*', 4, 3],
        ),
        (
            MetaCommand::DeleteAcls {
                acls: vec![acl_record("t", "U:a")],
            },
            vec![10, 1, 2, 1, b't', 3, 3, b'U', b':', b'a', 1, b'*', 4, 3],
        ),
        (
            MetaCommand::CreateTopicWithConfigs {
                name: "t".into(),
                assignment: vec![vec![1]],
                configs: crate::TopicConfigs::from_pairs([("segment.ms", "5")]).unwrap(),
            },
            [
                &[11, 1, b't', 1, 1, 1, 1, 10][..],
                b"segment.ms",
                &[1, b'5'],
            ]
            .concat(),
        ),
        (
            MetaCommand::SetTopicConfigs {
                name: "t".into(),
                version: 2,
                configs: crate::TopicConfigs::default(),
            },
            vec![12, 1, b't', 2, 0],
        ),
        (
            MetaCommand::AddPartitions {
                name: "t".into(),
                topic_id: 3,
                from: 1,
                assignment: vec![vec![2, 1]],
            },
            vec![13, 1, b't', 3, 1, 1, 2, 2, 1],
        ),
        (
            MetaCommand::CancelReassignment {
                name: "t".into(),
                partition: 2,
            },
            vec![14, 1, b't', 2],
        ),
        (MetaCommand::DecommissionBroker { id: 4 }, vec![15, 4]),
        (MetaCommand::RemoveBroker { id: 4 }, vec![16, 4]),
        (
            MetaCommand::RegisterRack {
                id: 2,
                rack: Some("a".into()),
            },
            vec![17, 2, 1, 1, b'a'],
        ),
        (MetaCommand::FinalizeVersion { version: 2 }, vec![18, 2]),
    ];
    for (command, golden) in cases {
        assert_eq!(bytes(&command), golden, "{command:?}");
        assert_eq!(
            postcard::from_bytes::<MetaCommand>(&golden).unwrap(),
            command
        );
    }
}

/// Kafka's own expectation (`AdminZkClientTest.testReplicaAssignment`): five brokers, ten
/// partitions, three replicas, start index 0.
#[test]
fn assignment_matches_kafka() {
    let got = assign(&[0, 1, 2, 3, 4], 10, 3, 0).unwrap();
    let want: Vec<Vec<NodeId>> = vec![
        vec![0, 1, 2],
        vec![1, 2, 3],
        vec![2, 3, 4],
        vec![3, 4, 0],
        vec![4, 0, 1],
        vec![0, 2, 3],
        vec![1, 3, 4],
        vec![2, 4, 0],
        vec![3, 0, 1],
        vec![4, 1, 2],
    ];
    assert_eq!(got, want);
}

#[test]
fn assignment_spreads_leaders_and_bounds_the_factor() {
    let got = assign(&[3, 1, 2], 3, 3, 1).unwrap();
    let leaders: Vec<NodeId> = got.iter().map(|r| r[0]).collect();
    assert_eq!(leaders, vec![2, 3, 1]);
    assert!(got.iter().all(|r| r.len() == 3));
    assert_eq!(assign(&[1], 4, 1, 7).unwrap(), vec![vec![1]; 4]);
    assert!(assign(&[1, 2], 1, 3, 0).is_err());
    assert!(assign(&[1, 2], 1, 0, 0).is_err());
}

#[test]
fn topic_names_follow_kafkas_rules() {
    for ok in [
        "email.send",
        "a",
        "A-b_c.9",
        &"x".repeat(TOPIC_NAME_BYTES_MAX),
    ] {
        assert_eq!(check_topic_name(ok), Ok(()), "{ok}");
    }
    for bad in [
        "",
        ".",
        "..",
        "a b",
        "é",
        "a/b",
        "__internal",
        &"x".repeat(250),
        &"x".repeat(TOPIC_NAME_BYTES_MAX + 1),
    ] {
        assert!(check_topic_name(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn commands_apply_in_order_and_report_outcomes() {
    let brokers = [1, 2, 3];
    let mut c = Catalog::with_configured(&[("fixed".into(), 2)], &brokers);
    let create = |name: &str| MetaCommand::CreateTopic {
        name: name.into(),
        assignment: assign(&brokers, 2, 2, 0).unwrap(),
    };
    c.apply(0, Some(&create("t")));
    assert_eq!(c.outcome(0), Some(Ok(())));
    assert_eq!(c.topic("t").unwrap().id, 1);
    c.apply(1, Some(&create("t")));
    assert_eq!(c.outcome(1), Some(Err(Refused::TopicExists)));
    c.apply(2, None);
    assert!(matches!(c.outcome(2), Some(Err(Refused::Invalid(_)))));
    let delete = |name: &str| MetaCommand::DeleteTopic { name: name.into() };
    c.apply(3, Some(&delete("fixed")));
    assert!(matches!(c.outcome(3), Some(Err(Refused::Invalid(_)))));
    c.apply(4, Some(&delete("t")));
    assert_eq!(c.outcome(4), Some(Ok(())));
    assert!(c.topic("t").is_none() && c.is_deleted(1));
    c.apply(5, Some(&delete("t")));
    assert_eq!(c.outcome(5), Some(Err(Refused::UnknownTopic)));
    // Created again: a new id.
    c.apply(6, Some(&create("t")));
    assert_eq!(c.topic("t").unwrap().id, 7);
    assert_eq!((c.next_offset(), c.created()), (7, 2));
    // A broker outside the cluster is refused.
    let stray = MetaCommand::CreateTopic {
        name: "u".into(),
        assignment: vec![vec![1, 9]],
    };
    c.apply(7, Some(&stray));
    assert!(matches!(c.outcome(7), Some(Err(Refused::Invalid(_)))));
    assert!(c.topic("u").is_none());
}

#[test]
fn brokers_register_their_addresses_and_the_latest_one_counts() {
    let brokers = [1, 2, 3];
    let mut c = Catalog::with_configured(&[], &brokers);
    let register = |id, addr: &str| MetaCommand::RegisterBroker {
        id,
        addr: addr.into(),
        join: false,
    };
    assert_eq!(c.broker_addr(2), None);
    c.apply(0, Some(&register(2, "127.0.0.1:19092")));
    assert_eq!(c.outcome(0), Some(Ok(())));
    c.apply(1, Some(&register(2, "127.0.0.1:19093")));
    assert_eq!(c.broker_addr(2), Some("127.0.0.1:19093".parse().unwrap()));
    c.apply(2, Some(&register(9, "127.0.0.1:1")));
    assert!(matches!(c.outcome(2), Some(Err(Refused::Invalid(_)))));
    c.apply(3, Some(&register(3, "localhost")));
    assert!(matches!(c.outcome(3), Some(Err(Refused::Invalid(_)))));
    assert_eq!((c.broker_addr(9), c.broker_addr(3)), (None, None));

    assert_eq!(c.brokers(), vec![1, 2, 3], "no join, no new broker");
    // A broker that joins is one of the cluster's from then on: topics may use it.
    let join = MetaCommand::RegisterBroker {
        id: 4,
        addr: "127.0.0.1:39092".into(),
        join: true,
    };
    let on_4 = MetaCommand::CreateTopic {
        name: "t".into(),
        assignment: vec![vec![4, 1]],
    };
    c.apply(4, Some(&on_4));
    assert!(
        matches!(c.outcome(4), Some(Err(Refused::Invalid(_)))),
        "not a broker yet"
    );
    c.apply(5, Some(&join));
    assert_eq!(c.brokers(), vec![1, 2, 3, 4]);
    c.apply(6, Some(&on_4));
    assert_eq!(c.outcome(6), Some(Ok(())));
    // Joining again under a taken id is refused; the broker itself re-registers without
    // `join` when it moves.
    c.apply(7, Some(&join));
    assert!(matches!(c.outcome(7), Some(Err(Refused::Invalid(_)))));
    c.apply(8, Some(&register(4, "127.0.0.1:49092")));
    assert_eq!(c.broker_addr(4), Some("127.0.0.1:49092".parse().unwrap()));
    // The command keeps its place in the encoding: older logs still decode.
    let bytes = postcard::to_allocvec(&register(1, "127.0.0.1:9092")).unwrap();
    assert_eq!(bytes[0], 2, "the third variant");
    // Kafka addresses: of the cluster's brokers only; the latest counts.
    let kafka = |id, addr: &str| MetaCommand::RegisterKafka {
        id,
        addr: addr.into(),
    };
    c.apply(9, Some(&kafka(2, "127.0.0.1:9093")));
    c.apply(10, Some(&kafka(2, "127.0.0.1:9094")));
    assert_eq!(c.kafka_addr(2), Some("127.0.0.1:9094".parse().unwrap()));
    c.apply(11, Some(&kafka(9, "127.0.0.1:9095")));
    assert!(matches!(c.outcome(11), Some(Err(Refused::Invalid(_)))));
    c.apply(12, Some(&kafka(3, "nowhere")));
    assert!(matches!(c.outcome(12), Some(Err(Refused::Invalid(_)))));
    assert_eq!((c.kafka_addr(9), c.kafka_addr(3)), (None, None));
    // Host names are registered as they are (whoever connects resolves them).
    c.apply(13, Some(&register(3, "broker-3.example:29092")));
    c.apply(14, Some(&kafka(3, "kafka-3.example:9092")));
    assert_eq!((c.outcome(13), c.outcome(14)), (Some(Ok(())), Some(Ok(()))));
    let named = |a: Option<crate::Address>| a.map(|a| a.to_string());
    assert_eq!(
        (named(c.broker_addr(3)), named(c.kafka_addr(3))),
        (
            Some("broker-3.example:29092".into()),
            Some("kafka-3.example:9092".into())
        )
    );
}

#[test]
fn a_partition_moves_and_the_brokers_it_leaves_keep_their_replica_until_done() {
    let brokers = [1, 2, 3, 4];
    let mut c = Catalog::with_configured(&[("fixed".into(), 1)], &brokers);
    let create = MetaCommand::CreateTopic {
        name: "t".into(),
        assignment: vec![vec![1, 2, 3], vec![2, 3, 4]],
    };
    c.apply(0, Some(&create));
    let id = c.topic("t").unwrap().id;
    let reassign = |name: &str, partition, replicas: Vec<NodeId>| MetaCommand::ReassignPartition {
        name: name.into(),
        partition,
        replicas,
    };
    c.apply(1, Some(&reassign("t", 0, vec![4, 2, 3])));
    assert_eq!(c.outcome(1), Some(Ok(())));
    let t = c.topic("t").unwrap();
    assert_eq!(t.assignment[0], vec![4, 2, 3]);
    assert_eq!(t.leaving[0], vec![1]);
    assert_eq!(t.moved, vec![true, false]);
    // It is listed as moving: to 4, 2, 3, leaving 1.
    let moving = c.reassignments(None);
    assert_eq!(moving.len(), 1);
    assert_eq!(
        (&moving[0].replicas, &moving[0].adding, &moving[0].removing),
        (&vec![4, 2, 3, 1], &vec![4], &vec![1])
    );
    assert!(c.reassignments(Some(&["other".to_string()])).is_empty());
    // A second move of the partition waits for the first.
    c.apply(2, Some(&reassign("t", 0, vec![1, 2, 3])));
    assert_eq!(c.outcome(2), Some(Err(Refused::Moving)));
    // The same move again (a retried request) is no change.
    c.apply(3, Some(&reassign("t", 0, vec![4, 2, 3])));
    assert_eq!(c.outcome(3), Some(Ok(())));
    assert_eq!(c.topic("t").unwrap().leaving[0], vec![1]);
    // A Done naming other replicas is stale; the right one ends the move.
    let done = |replicas| MetaCommand::ReassignDone {
        topic_id: id,
        partition: 0,
        replicas,
    };
    c.apply(4, Some(&done(vec![1, 2, 3])));
    assert!(matches!(c.outcome(4), Some(Err(Refused::Invalid(_)))));
    assert_eq!(c.topic("t").unwrap().leaving[0], vec![1]);
    c.apply(5, Some(&done(vec![4, 2, 3])));
    assert_eq!(c.outcome(5), Some(Ok(())));
    assert!(c.topic("t").unwrap().leaving[0].is_empty());
    assert!(c.reassignments(None).is_empty());
    // What is refused: a configured topic, a partition or broker that does not exist,
    // a broker twice.
    let bad = [
        (reassign("fixed", 0, vec![1]), "Invalid"),
        (reassign("t", 5, vec![1]), "UnknownTopic"),
        (reassign("t", 1, vec![9]), "BadReplicas"),
        (reassign("t", 1, vec![2, 2]), "BadReplicas"),
    ];
    for (offset, (command, refusal)) in (6..).zip(&bad) {
        c.apply(offset, Some(command));
        let outcome = format!("{:?}", c.outcome(offset));
        assert!(outcome.contains(refusal), "{command:?}: {outcome}");
    }
    c.apply(10, Some(&reassign("nope", 0, vec![1])));
    assert_eq!(c.outcome(10), Some(Err(Refused::UnknownTopic)));
    assert_eq!(c.topic("t").unwrap().assignment[1], vec![2, 3, 4]);

    // A move taken back: the partition returns to its replicas, and the broker the move
    // added leaves it instead; nothing to take back once that move is done.
    let cancel = |partition| MetaCommand::CancelReassignment {
        name: "t".into(),
        partition,
    };
    c.apply(11, Some(&reassign("t", 1, vec![2, 3, 1])));
    c.apply(12, Some(&cancel(1)));
    assert_eq!(c.outcome(12), Some(Ok(())));
    let t = c.topic("t").unwrap();
    assert_eq!(t.assignment[1], vec![2, 3, 4]);
    assert_eq!(t.leaving[1], vec![1]);
    let moving = c.reassignments(None);
    assert_eq!(
        (&moving[0].replicas, &moving[0].adding, &moving[0].removing),
        (&vec![2, 3, 4, 1], &vec![], &vec![1])
    );
    c.apply(13, Some(&cancel(1)));
    assert_eq!(c.outcome(13), Some(Err(Refused::NotMoving)));
    c.apply(
        14,
        Some(&MetaCommand::ReassignDone {
            topic_id: id,
            partition: 1,
            replicas: vec![2, 3, 4],
        }),
    );
    assert_eq!(c.outcome(14), Some(Ok(())));
    assert!(c.reassignments(None).is_empty());
    c.apply(15, Some(&cancel(1)));
    assert_eq!(c.outcome(15), Some(Err(Refused::NotMoving)));
    c.apply(16, Some(&cancel(0)));
    assert_eq!(c.outcome(16), Some(Err(Refused::NotMoving)));
}

/// A decommission moves every partition off the broker, each keeping its replica count, the
/// broker's place going to the least loaded broker the partition is not on; it is refused
/// whole where the others cannot hold a partition, and for a configured topic's broker. Once
/// the moves are done the broker is removed, and refused as a target meanwhile.
#[test]
fn a_decommissioned_broker_s_partitions_move_to_the_least_loaded_others() {
    let mut c = Catalog::with_configured(&[], &[1, 2, 3, 4]);
    let create = MetaCommand::CreateTopic {
        name: "t".into(),
        assignment: vec![vec![4, 1], vec![1, 4], vec![2, 3], vec![4, 2]],
    };
    c.apply(0, Some(&create));
    let id = c.topic("t").unwrap().id;
    c.apply(1, Some(&MetaCommand::RemoveBroker { id: 4 }));
    assert!(matches!(c.outcome(1), Some(Err(Refused::Invalid(_)))));
    c.apply(2, Some(&MetaCommand::DecommissionBroker { id: 4 }));
    assert_eq!(c.outcome(2), Some(Ok(())));
    let t = c.topic("t").unwrap();
    // Loads before: 1 → 2, 2 → 2, 3 → 1; each place goes to the least loaded (the lowest id
    // of equals), counting the places given before it: 3, then 2, then 1.
    assert_eq!(
        t.assignment,
        vec![vec![1, 3], vec![1, 2], vec![2, 3], vec![2, 1]]
    );
    assert_eq!(t.leaving, vec![vec![4], vec![4], vec![], vec![4]]);
    assert!(c.is_draining(4));
    assert_eq!(c.placement_brokers(), vec![1, 2, 3]);
    assert_eq!(c.replicas_on(4), (3, 0));
    assert!(c.drained().is_empty());
    // Asked again: nothing changes.
    c.apply(3, Some(&MetaCommand::DecommissionBroker { id: 4 }));
    assert_eq!(c.outcome(3), Some(Ok(())));
    for (offset, p) in (4..).zip([0u32, 1, 3]) {
        let replicas = c.topic("t").unwrap().assignment[p as usize].clone();
        c.apply(
            offset,
            Some(&MetaCommand::ReassignDone {
                topic_id: id,
                partition: p,
                replicas,
            }),
        );
        assert_eq!(c.outcome(offset), Some(Ok(())));
    }
    assert_eq!(c.drained(), vec![4]);
    c.apply(7, Some(&MetaCommand::RemoveBroker { id: 4 }));
    assert_eq!(c.outcome(7), Some(Ok(())));
    assert_eq!(c.brokers(), vec![1, 2, 3]);
    assert!(c.is_removed(4) && !c.is_draining(4));
    assert_eq!(c.broker_addr(4), None);

    // Three brokers left and a partition of three replicas: two brokers cannot hold it, and
    // nothing moves, not even the partitions they could hold.
    let mut c2 = c.clone();
    let wide = MetaCommand::CreateTopic {
        name: "wide".into(),
        assignment: vec![vec![1, 2, 3]],
    };
    c2.apply(8, Some(&wide));
    c2.apply(9, Some(&MetaCommand::DecommissionBroker { id: 3 }));
    match c2.outcome(9) {
        Some(Err(Refused::Invalid(reason))) => assert!(reason.contains("cannot hold"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(!c2.is_draining(3), "refused whole");
    assert_eq!(
        c2.topic("t").unwrap().assignment,
        c.topic("t").unwrap().assignment
    );
    assert!(c2.reassignments(None).is_empty());
    // A configured topic's broker cannot leave: its replicas cannot move.
    let mut fixed = Catalog::with_configured(&[("fixed".into(), 1)], &[1, 2, 3, 4]);
    fixed.apply(0, Some(&MetaCommand::DecommissionBroker { id: 4 }));
    match fixed.outcome(0) {
        Some(Err(Refused::Invalid(reason))) => assert!(reason.contains("configured"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        fixed.topic("fixed").unwrap().assignment[0],
        vec![1, 2, 3, 4]
    );
}

/// Rack-aware placement: every partition's replicas span as many racks as there are, and the
/// first replicas go round all brokers evenly (with no racks named it is the plain placement,
/// whose layout `assignment_matches_kafka` pins).
#[test]
fn replicas_are_spread_over_racks() {
    let racked = [
        (1, Some("a")),
        (2, Some("a")),
        (3, Some("b")),
        (4, Some("b")),
        (5, Some("c")),
        (6, Some("c")),
    ];
    for factor in 1..=6usize {
        for start in 0..6u64 {
            let placed = assign_racked(&racked, 12, factor, start).unwrap();
            let mut firsts = BTreeMap::<u64, usize>::new();
            for replicas in &placed {
                let distinct: BTreeSet<&u64> = replicas.iter().collect();
                assert_eq!(distinct.len(), factor, "{replicas:?}");
                let racks: BTreeSet<Option<&str>> = replicas
                    .iter()
                    .map(|b| racked.iter().find(|(id, _)| id == b).unwrap().1)
                    .collect();
                assert_eq!(racks.len(), factor.min(3), "factor {factor}: {replicas:?}");
                *firsts.entry(replicas[0]).or_default() += 1;
            }
            assert!(firsts.values().all(|n| *n == 2), "{firsts:?}");
        }
    }
    // Uneven racks: two brokers in one, one in the other; each partition of two replicas
    // has one in each.
    let uneven = [(1, Some("a")), (2, Some("a")), (3, Some("b"))];
    for replicas in assign_racked(&uneven, 6, 2, 0).unwrap() {
        assert!(replicas.contains(&3), "{replicas:?}");
    }
    assert!(assign_racked(&racked, 1, 7, 0).is_err());
}

/// A decommissioned broker's place goes to a broker in a rack its partition is not in yet,
/// even one holding more replicas.
#[test]
fn a_decommissioned_brokers_place_goes_to_another_rack() {
    let mut c = Catalog::with_configured(&[], &[1, 2, 3, 4]);
    let rack = |id, rack: &str| MetaCommand::RegisterRack {
        id,
        rack: Some(rack.into()),
    };
    c.apply(0, Some(&rack(1, "a")));
    c.apply(1, Some(&rack(2, "a")));
    c.apply(2, Some(&rack(3, "b")));
    c.apply(3, Some(&rack(4, "b")));
    assert_eq!(c.rack(3), Some("b"));
    c.apply(4, Some(&rack(9, "c")));
    assert!(matches!(c.outcome(4), Some(Err(Refused::Invalid(_)))));
    let create = MetaCommand::CreateTopic {
        name: "t".into(),
        // Broker 3 holds more than broker 4.
        assignment: vec![vec![1, 4], vec![3, 2], vec![3, 1]],
    };
    c.apply(5, Some(&create));
    c.apply(6, Some(&MetaCommand::DecommissionBroker { id: 1 }));
    assert_eq!(c.outcome(6), Some(Ok(())));
    let t = c.topic("t").unwrap();
    // Partition 0 keeps 4 (rack b): broker 2 (rack a) takes 1's place. Partition 2 keeps 3
    // (rack b): broker 2 again, not 4.
    assert_eq!(t.assignment[0], vec![4, 2]);
    assert_eq!(t.assignment[2], vec![3, 2]);
}

/// Replica balancing moves one replica at a time from the fullest broker to the emptiest,
/// never more partitions at once than allowed, never while a broker is decommissioned, and
/// stops once the counts differ by at most one.
#[test]
fn balancing_moves_even_out_the_brokers_replicas() {
    let mut c = Catalog::with_configured(&[("fixed".into(), 2)], &[1, 2, 3]);
    let create = MetaCommand::CreateTopic {
        name: "t".into(),
        assignment: assign(&[1, 2, 3], 6, 2, 0).unwrap(),
    };
    c.apply(0, Some(&create));
    let id = c.topic("t").unwrap().id;
    assert_eq!(c.balancing_move(4), None, "four each: balanced");
    c.apply(
        1,
        Some(&MetaCommand::RegisterBroker {
            id: 4,
            addr: "127.0.0.1:9".into(),
            join: true,
        }),
    );
    assert_eq!(c.balancing_move(0), None, "no move allowed at once");
    let mut offset = 2;
    // Bounded: each round moves one replica toward balance.
    for _ in 0..10 {
        let Some((name, partition, replicas)) = c.balancing_move(1) else {
            break;
        };
        assert!(replicas.contains(&4), "{replicas:?}");
        c.apply(
            offset,
            Some(&MetaCommand::ReassignPartition {
                name,
                partition,
                replicas: replicas.clone(),
            }),
        );
        assert_eq!(c.outcome(offset), Some(Ok(())));
        // A second move waits for the first.
        assert_eq!(c.balancing_move(1), None);
        c.apply(
            offset + 1,
            Some(&MetaCommand::ReassignDone {
                topic_id: id,
                partition,
                replicas,
            }),
        );
        offset += 2;
    }
    let counts: Vec<usize> = (1..=4)
        .map(|b| {
            c.topic("t")
                .unwrap()
                .assignment
                .iter()
                .filter(|r| r.contains(&b))
                .count()
        })
        .collect();
    assert_eq!(counts, vec![3, 3, 3, 3]);
    assert_eq!(c.balancing_move(4), None);
}

/// The finalized protocol version only rises: a late or repeated `FinalizeVersion` of an older
/// version changes nothing.
#[test]
fn the_finalized_protocol_version_only_rises() {
    let mut c = Catalog::with_configured(&[], &[1, 2, 3]);
    assert_eq!(c.finalized_version(), 1);
    c.apply(0, Some(&MetaCommand::FinalizeVersion { version: 2 }));
    assert_eq!(c.finalized_version(), 2);
    c.apply(1, Some(&MetaCommand::FinalizeVersion { version: 1 }));
    assert_eq!(c.finalized_version(), 2);
    assert_eq!(c.outcome(1), Some(Ok(())));
    assert_eq!(MetaCommand::FinalizeVersion { version: 2 }.since(), 2);
    assert_eq!(MetaCommand::RemoveBroker { id: 1 }.since(), 1);
}
