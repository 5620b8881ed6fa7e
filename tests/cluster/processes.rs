//! `replog node` processes and the CLI: a SIGKILL of the leader, the tutorial step by step, and
//! keyed lines produced in batches and consumed from every partition.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_broker_processes_survive_sigkill_of_the_leader() {
    use replog::{Client, ClientConfig};
    let dir = tempfile::tempdir().unwrap();
    let addrs = process_addrs(3);
    let mut brokers: Vec<Option<Broker>> = (1..=3)
        .map(|id| Some(spawn_broker(id, &addrs, dir.path(), true)))
        .collect();

    // Connect through broker 2 (retrying while the processes start) and wait for a leader.
    let deadline = Instant::now() + Duration::from_secs(20);
    let client = wait_until(deadline, "brokers to start", async || {
        Client::connect(&[addrs[1]], ClientConfig::default()).await
    })
    .await;
    let leader = wait_until(deadline, "a leader", async || {
        client.describe(TOPIC).await.ok()?[0].leader
    })
    .await;

    let mut acked = Vec::new();
    for i in 0..10 {
        let v = format!("before-{i}");
        client
            .send(TOPIC, 0, &[Record::new(v.clone())])
            .await
            .unwrap();
        acked.push(v);
    }

    // SIGKILL the leader's process; the client finds the new leader and keeps writing.
    drop(brokers[leader as usize - 1].take());
    for i in 0..10 {
        let v = format!("after-{i}");
        let mut attempts = 0;
        loop {
            attempts += 1;
            assert!(attempts <= 5, "write {v} kept failing");
            match client.send(TOPIC, 0, &[Record::new(v.clone())]).await {
                Ok(_) => break,
                // Sent to the dying leader: check whether it landed before resending.
                Err(Error::Indeterminate { .. }) => {
                    let all = client
                        .fetch(TOPIC, 0, Offset(0), 1 << 20, None)
                        .await
                        .unwrap();
                    if all
                        .iter()
                        .flat_map(|b| b.records())
                        .any(|(_, r)| r.value == v.as_bytes())
                    {
                        break;
                    }
                }
                Err(e) => panic!("unexpected {e}"),
            }
        }
        acked.push(v);
    }

    // Restart it from its directory; every replica converges on the same records.
    brokers[leader as usize - 1] = Some(spawn_broker(leader, &addrs, dir.path(), true));
    for addr in &addrs {
        let what = format!("{addr} to hold {acked:?}");
        wait_until(Duration::from_secs(20), &what, async || {
            let got: Vec<String> = match client
                .fetch(TOPIC, 0, Offset(0), 1 << 20, Some(addr.into()))
                .await
            {
                Ok(batches) => batches
                    .iter()
                    .flat_map(|b| b.records())
                    .map(|(_, r)| String::from_utf8_lossy(&r.value).into_owned())
                    .collect(),
                Err(_) => Vec::new(),
            };
            if got == acked {
                Ok(())
            } else {
                Err(format!("{addr} has {got:?}"))
            }
        })
        .await;
    }
}

/// The seed tutorial through the CLI against three `replog node` processes named
/// `localhost:PORT`: describe, produce through a follower, consume from every broker's own
/// replica, a broker joining and leaving, and one-line errors.
#[test]
fn the_tutorial_runs_through_the_cli_against_three_broker_processes() {
    let dir = tempfile::tempdir().unwrap();
    let all = process_addrs(8);
    let (addrs, fourth) = (all[..3].to_vec(), all[3]);
    // Brokers and clients by host name (`localhost:PORT`), as operators name them; each
    // broker has a Kafka listener too, named alike.
    let kafka = |id: u64| format!("localhost:{}", all[3 + id as usize].port());
    let _brokers: Vec<Broker> = (1..=3)
        .map(|id| spawn_named_broker(id, &addrs, dir.path(), &["--kafka-listen", &kafka(id)]))
        .collect();
    let server = |i: usize| format!("localhost:{}", addrs[i].port());

    // Create the topic through broker 2, retrying while the processes start.
    let create = [
        "topics",
        "--bootstrap-server",
        &server(1),
        "--create",
        "--topic",
        TOPIC,
        "--partitions",
        "1",
        "--replication-factor",
        "3",
    ];
    let out = wait_until_blocking(Duration::from_secs(20), "the topic to be created", || {
        let (ok, out, _) = cli(&create, "");
        ok.then_some(out)
    });
    assert_eq!(out.trim(), format!("Created topic {TOPIC}."));
    let (ok, out, err) = cli(&create, "");
    assert!(
        !ok && err.contains("already exists"),
        "a second create: success {ok}, stdout {out:?}, stderr {err:?}"
    );
    let (ok, out, _) = cli(&["topics", "--bootstrap-server", &server(2), "--list"], "");
    assert!(ok && out.contains(TOPIC), "{out}");

    // Describe through broker 2 until a leader is elected: Kafka's line format.
    let (leader, line) = wait_until_blocking(Duration::from_secs(20), "a leader", || {
        let (ok, out, _) = cli(
            &[
                "topics",
                "--bootstrap-server",
                &server(1),
                "--describe",
                "--topic",
                TOPIC,
            ],
            "",
        );
        let line = out.lines().next()?.to_string();
        let leader: u64 = line
            .split("Leader: ")
            .nth(1)?
            .split('\t')
            .next()?
            .parse()
            .ok()?;
        ok.then_some((leader, line))
    });
    assert!(
        line.starts_with(&format!(
            "Topic: {TOPIC}\tPartition: 0\tLeader: {leader}\tReplicas: 1,2,3\tIsr: "
        )),
        "{line}"
    );

    // Produce through a follower: the client is redirected to the leader.
    let follower = (0..3).find(|i| *i as u64 + 1 != leader).unwrap();
    let (ok, out, err) = cli(
        &[
            "produce",
            "--bootstrap-server",
            &server(follower),
            "--topic",
            TOPIC,
            "--print-offsets",
        ],
        "follower-message-1\n",
    );
    assert!(ok, "produce failed: {err}");
    assert!(
        out.contains(&format!("{TOPIC}/0@0")) && out.contains(&server(leader as usize - 1)),
        "landed at offset 0 through the leader: {out}"
    );

    // Consume from the beginning on each broker's own replica.
    for i in 0..3 {
        let out = wait_until_blocking(
            Duration::from_secs(10),
            "the record on every replica",
            || {
                let (ok, out, _) = cli(
                    &[
                        "consume",
                        "--bootstrap-server",
                        &server(i),
                        "--topic",
                        TOPIC,
                        "--from-beginning",
                        "--from-replica",
                        "--max-messages",
                        "1",
                        "--timeout-ms",
                        "2000",
                    ],
                    "",
                );
                (ok && out.contains("follower-message-1")).then_some(out)
            },
        );
        assert_eq!(out.trim(), "follower-message-1");
    }

    // A fourth broker joins; a topic created afterwards is spread over all four.
    let mut with_joiner = addrs.clone();
    with_joiner.push(fourth);
    let _joiner = spawn_named_broker(
        4,
        &with_joiner,
        dir.path(),
        &["--join", "--kafka-listen", &kafka(4)],
    );
    let joiner = format!("localhost:{}", with_joiner[3].port());
    // Wait for the join: broker 1, which the create below goes to and which spreads the topic
    // by its own catalog, names broker 4 among the cluster's brokers.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let through_1 = addrs[0];
    wait_until_blocking(
        Duration::from_secs(30),
        "broker 1 to know the joined broker",
        || {
            runtime.block_on(async {
                let client = replog::Client::connect(&[through_1], replog::ClientConfig::default())
                    .await
                    .ok()?;
                let brokers = client.brokers().await.ok()?;
                brokers.iter().any(|(id, _)| *id == 4).then_some(())
            })
        },
    );
    drop(runtime);
    let spread = [
        "topics",
        "--bootstrap-server",
        &server(0),
        "--create",
        "--topic",
        "spread",
        "--partitions",
        "4",
        "--replication-factor",
        "2",
    ];
    let (ok, created, err) = cli(&spread, "");
    assert!(ok, "create said {created}{err}");
    let describe_spread = [
        "topics",
        "--bootstrap-server",
        &joiner,
        "--describe",
        "--topic",
        "spread",
    ];
    // The joiner names the topic once it has applied the command.
    let described = wait_until_blocking(
        Duration::from_secs(20),
        "the joiner to describe the topic",
        || {
            let (ok, out, _) = cli(&describe_spread, "");
            (ok && out.lines().filter(|l| l.contains("Replicas:")).count() == 4).then_some(out)
        },
    );
    // Four brokers, four partitions: each broker is the first replica of one.
    assert!(
        described.lines().any(|l| l.contains("Replicas: 4,")),
        "spread over all four: {described}"
    );
    assert_eq!(described.lines().count(), 4, "{described}");

    // Partition 0 moves to the two brokers that do not host it.
    let field = |line: &str, name: &str| -> String {
        line.split_whitespace()
            .skip_while(|w| *w != name)
            .nth(1)
            .unwrap_or_default()
            .to_string()
    };
    let line0 = described
        .lines()
        .find(|l| field(l, "Partition:") == "0")
        .unwrap_or_default()
        .to_string();
    let hosts = field(&line0, "Replicas:");
    let target: Vec<String> = (1..=4)
        .map(|b: u64| b.to_string())
        .filter(|b| !hosts.split(',').any(|h| h == b))
        .collect();
    assert_eq!(target.len(), 2, "{line0}");
    let target = target.join(",");
    let (ok, out, err) = cli(
        &[
            "topics",
            "--bootstrap-server",
            &server(2),
            "--reassign",
            "--topic",
            "spread",
            "--partition",
            "0",
            "--replicas",
            &target,
        ],
        "",
    );
    assert!(ok, "{out}{err}");
    let moved = |l: &str| {
        let mut isr: Vec<&str> = l
            .split_whitespace()
            .skip_while(|w| *w != "Isr:")
            .nth(1)
            .unwrap_or_default()
            .split(',')
            .collect();
        isr.sort_unstable();
        let mut want: Vec<&str> = target.split(',').collect();
        want.sort_unstable();
        field(l, "Partition:") == "0" && field(l, "Replicas:") == target && isr == want
    };
    let what = format!("partition 0 to move to {target}");
    wait_until_blocking(Duration::from_secs(20), &what, || {
        let (ok, out, err) = cli(&describe_spread, "");
        if ok && out.lines().any(moved) {
            Ok(())
        } else {
            Err(format!("{out}{err}"))
        }
    });

    // Broker 4 is decommissioned (once partition 0's move has ended: until then it is
    // refused as still moving): its replicas move to the first three, and it leaves.
    let decommission = [
        "brokers",
        "--bootstrap-server",
        &server(1),
        "--decommission",
        "4",
    ];
    wait_until_blocking(
        Duration::from_secs(30),
        "broker 4's decommission to be taken",
        || {
            let (ok, out, err) = cli(&decommission, "");
            if ok {
                Ok(out)
            } else {
                Err(format!("{out}{err}"))
            }
        },
    );
    let list = ["brokers", "--bootstrap-server", &server(0), "--list"];
    wait_until_blocking(Duration::from_secs(60), "broker 4 to leave", || {
        let (ok, out, err) = cli(&list, "");
        let ids: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        if ok && ids == ["1", "2", "3"] {
            Ok(())
        } else {
            Err(format!("{out}{err}"))
        }
    });
    // Kafka's clients see three brokers, by name (kcat's metadata through broker 1).
    if let Some(kcat) = crate::kafka::kcat() {
        let at = kafka(1);
        wait_until_blocking(
            Duration::from_secs(30),
            "kcat to list three brokers",
            || {
                let (ok, out, err) = crate::kafka::run(kcat, &["-L", "-b", &at], "");
                let named =
                    (1..=3).all(|id| out.contains(&format!("broker {id} at {}", kafka(id))));
                if ok && out.contains(" 3 brokers:") && named && !out.contains("broker 4 at") {
                    Ok(())
                } else {
                    Err(format!("{out}{err}"))
                }
            },
        );
    }
    let (ok, described, err) = cli(
        &[
            "topics",
            "--bootstrap-server",
            &server(0),
            "--describe",
            "--topic",
            "spread",
        ],
        "",
    );
    assert!(ok, "{err}");
    assert_eq!(described.lines().count(), 4, "{described}");
    for line in described.lines() {
        assert!(
            !field(line, "Replicas:").split(',').any(|b| b == "4"),
            "{described}"
        );
    }
    let (ok, brokers, err) = cli(
        &["brokers", "--bootstrap-server", &server(2), "--describe"],
        "",
    );
    assert!(ok, "{err}");
    assert_eq!(brokers.lines().count(), 3, "{brokers}");
    assert!(
        brokers.lines().all(|l| l.contains("State: active")),
        "{brokers}"
    );

    // Errors are one line and a non-zero exit, never a panic.
    for args in [
        vec![
            "consume",
            "--bootstrap-server",
            &server(0),
            "--topic",
            "nope",
            "--timeout-ms",
            "500",
        ],
        vec![
            "produce",
            "--bootstrap-server",
            "127.0.0.1:1",
            "--topic",
            TOPIC,
        ],
    ] {
        let (ok, _, err) = cli(&args, "x\n");
        assert!(!ok, "{args:?} should fail");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(
            err.starts_with("replog: error:") && !err.contains("panicked"),
            "{err}"
        );
    }
}

/// `replog produce` goes through `Producer` (batched; keyed lines to
/// Kafka's partition for their key) and says how many records were acknowledged; `replog
/// consume` reads every partition unless `--partition` narrows it, printing the fields asked
/// for; a line that cannot be written is named and the exit is non-zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_produces_keyed_lines_batched_and_consumes_every_partition() {
    const KEYED: &str = "keyed";
    let dir = tempfile::tempdir().unwrap();
    let cluster = local_cluster(3, dir.path(), KEYED, 3, |_| {}).await;
    let server = cluster.addrs()[1].to_string();
    let run = |args: Vec<String>, input: String| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cli(&args, &input)
        })
    };
    let args = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        v.extend(["--bootstrap-server", &server, "--topic", KEYED].map(String::from));
        v
    };
    let input: String = (0..3000)
        .map(|i| format!("key-{}:value-{i}\n", i % 50))
        .collect();
    let (ok, _, err) = run(args(&["produce", "--key-separator", ":"]), input)
        .await
        .unwrap();
    assert!(ok, "produce failed: {err}");
    assert!(err.contains("3000 records acknowledged"), "{err}");

    let consume = |extra: &[&str]| {
        let mut a = args(&["consume", "--from-beginning", "--timeout-ms", "3000"]);
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let (ok, out, err) = run(
        consume(&["--print-partition", "--print-key"]),
        String::new(),
    )
    .await
    .unwrap();
    assert!(ok, "consume failed: {err}");
    let mut by_key: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for line in out.lines() {
        let mut fields = line.split('\t');
        let partition: u32 = fields
            .next()
            .and_then(|f| f.strip_prefix("Partition:"))
            .unwrap()
            .parse()
            .unwrap();
        let key = fields.next().unwrap().to_string();
        let n: u32 = fields
            .next()
            .and_then(|v| v.strip_prefix("value-"))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            partition,
            replog::partitioner::partition_for_key(key.as_bytes(), 3),
            "{key} on Kafka's partition for it"
        );
        by_key.entry(key).or_default().push(n);
    }
    assert_eq!(by_key.len(), 50, "every key, from every partition");
    for (key, ns) in &by_key {
        let k: u32 = key.strip_prefix("key-").unwrap().parse().unwrap();
        let want: Vec<u32> = (0..3000).filter(|i| i % 50 == k).collect();
        assert_eq!(ns, &want, "{key}: each record once, in the order produced");
    }
    // `--partition` narrows it to one.
    let (ok, out, _) = run(
        consume(&["--partition", "1", "--print-partition"]),
        String::new(),
    )
    .await
    .unwrap();
    assert!(ok);
    let on_one = by_key
        .keys()
        .filter(|k| replog::partitioner::partition_for_key(k.as_bytes(), 3) == 1)
        .count();
    assert_eq!(out.lines().count(), on_one * 60);
    assert!(out.lines().all(|l| l.starts_with("Partition:1\t")));
    // A partition that does not exist: every line named as not acknowledged, exit non-zero.
    let (ok, _, err) = run(args(&["produce", "--partition", "7"]), "a\nb\n".into())
        .await
        .unwrap();
    assert!(!ok);
    assert!(err.contains("line 1: not acknowledged"), "{err}");
    assert!(
        err.contains("2 of 2 records were not acknowledged"),
        "{err}"
    );
    cluster.shutdown().await.unwrap();
}
