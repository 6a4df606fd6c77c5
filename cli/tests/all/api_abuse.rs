//! Abuse of the `sluice serve` API itself: random and truncated requests at
//! every route, and a load of mixed requests from many tenants, while
//! pipelines run. Every answer is one of the documented statuses, never a
//! 5xx; the server does not fall over; the pipelines keep running.

use crate::serve::{
    Server, WAIT, assert_no_pipelines, client, create_tenant_with, free_port, sluice, start_server,
    start_server_with, state,
};
use sluice_tests::{Chaos, wait_until};
use std::io::{Read as _, Write as _};
use std::time::Duration;

/// The statuses `docs/api.md` documents.
const DOCUMENTED: [u16; 14] = [
    200, 201, 202, 400, 401, 403, 404, 405, 408, 409, 413, 415, 429, 431,
];

/// A paced, endless generator -> blackhole pipeline.
fn steady_pipeline(name: &str) -> String {
    format!(
        "[pipeline]\nname = \"{name}\"\n[source.generator]\nprofile = \"bronze\"\nrate = 2000\n[sink.blackhole]\n"
    )
}

fn records_in(api: &sluice_cli::client::Client, name: &str) -> u64 {
    state(api, name)["metrics"]["records_in"]
        .as_u64()
        .unwrap_or(0)
}

/// Deploys `name` for `token` and waits until it runs.
fn deploy_steady(server: &Server, token: &str, dir: &std::path::Path, name: &str) {
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, steady_pipeline(name)).expect("write");
    let (ok, _, err) = sluice(server, token, &["deploy", &file.display().to_string()]);
    assert!(ok, "{err}");
    let api = client(server, Some(token));
    wait_until("the pipeline to run", WAIT, || {
        state(&api, name)["state"] == "running" && records_in(&api, name) > 0
    });
}

const ROUTES: [&str; 21] = [
    "/healthz",
    "/metrics",
    "/",
    "/api/v1/tenants",
    "/api/v1/tenants/{name}",
    "/api/v1/plugins",
    "/api/v1/pipelines",
    "/api/v1/pipelines/{name}",
    "/api/v1/pipelines/{name}/stop",
    "/api/v1/pipelines/{name}/start",
    "/api/v1/pipelines/{name}/checkpoints",
    "/api/v1/pipelines/{name}/operators/{name}/plugin",
    "/api/v1/pipelines/{name}/operators/{name}/rollback",
    "/api/v1/pipelines/{name}/operators/{name}/versions",
    "/api/v1/pipelines/{name}/rollback",
    "/api/v1/pipelines/{name}/deployments",
    "/api/v1/pipelines/{name}/logs?follow={name}&limit={name}",
    "/api/v1/pipelines/{name}/errors",
    "/api/v1/pipelines/{name}/dead-letters",
    "/api/v1/pipelines/{name}/status",
    "/api/v1/operations/{name}",
];

fn pick<'a>(chaos: &mut Chaos, from: &[&'a str]) -> &'a str {
    from[chaos.below(from.len() as u64) as usize]
}

/// A random name: real, absent, hostile or huge.
fn name(chaos: &mut Chaos) -> String {
    match chaos.below(7) {
        0 => "steady".into(),
        1 => "team-c".into(),
        2 => "..%2F..%2Fetc%2Fpasswd".into(),
        3 => "x".repeat(chaos.below(5_000) as usize + 1),
        4 => "%ff%fe%00".into(),
        5 => "true".into(),
        _ => format!("p{}", chaos.below(1_000)),
    }
}

/// A random body: nothing, bytes, JSON of some shape, a pipeline file cut
/// short, or one past the body limit.
fn body(chaos: &mut Chaos) -> Vec<u8> {
    let pipeline =
        "[pipeline]\nname = \"fuzzed\"\n[source.generator]\ncount = 5\n[sink.blackhole]\n";
    match chaos.below(8) {
        0 => Vec::new(),
        1 => (0..chaos.below(2_000))
            .map(|_| chaos.below(256) as u8)
            .collect(),
        2 => br#"{"name": "fz", "limits": {"cpu_cores": -1}}"#.to_vec(),
        3 => br#"{"sha256": "00", "reach": {"s3": {"prefixes": ["nope"]}}}"#.to_vec(),
        4 => {
            let cut = chaos.below(pipeline.len() as u64 + 1) as usize;
            pipeline.as_bytes()[..cut].to_vec()
        }
        5 => br#"{"to": "deadbeef", "operator": ["x"]}"#.to_vec(),
        6 => vec![b'a'; (2 << 20) + chaos.below(1_000) as usize],
        _ => b"null".to_vec(),
    }
}

/// Raw bytes of a request, cut at a random point or malformed.
fn raw_request(chaos: &mut Chaos, port: u16) -> Vec<u8> {
    let whole = format!(
        "POST /api/v1/pipelines HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer nothing\r\nContent-Length: 64\r\n\r\n{{\"a\": 1}}"
    );
    match chaos.below(4) {
        0 => whole.as_bytes()[..chaos.below(whole.len() as u64) as usize].to_vec(),
        1 => format!(
            "GET /healthz HTTP/1.1\r\nX-Big: {}\r\n\r\n",
            "b".repeat(100_000)
        )
        .into_bytes(),
        2 => (0..chaos.below(500) + 1)
            .map(|_| chaos.below(256) as u8)
            .collect(),
        _ => format!("GET {} HTTP/1.1\r\nHost: x\r\n\r\n", "/a".repeat(40_000)).into_bytes(),
    }
}

/// The status of a raw exchange, if the server answered before closing.
fn raw_status(port: u16, request: &[u8]) -> Option<u16> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let _ = stream.write_all(request);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    text.strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
}

/// Random requests (method, route, names, token, headers, body) and raw
/// requests cut short or malformed, at every route: each answer is a
/// documented status, never a 5xx; the server stays up, and another
/// tenant's pipeline keeps running throughout.
#[test]
fn random_and_truncated_requests_get_documented_answers_and_disturb_no_pipeline() {
    let state_dir = tempfile::tempdir().expect("state dir");
    let port = free_port();
    // No rate limit, so that the requests reach the handlers (the limit
    // has its own test below).
    let (server, admin) = start_server_with(
        state_dir.path(),
        port,
        &["--rate-limit", "1000000", "--rate-burst", "1000000"],
        &[],
    );
    let admin = admin.expect("admin token");
    let team_a = create_tenant_with(&server, &admin, "team-a", &[]);
    let team_c = create_tenant_with(&server, &admin, "team-c", &[]);
    let files = tempfile::tempdir().expect("files");
    deploy_steady(&server, &team_c, files.path(), "steady");
    let watched = client(&server, Some(&team_c));
    let before = records_in(&watched, "steady");

    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let mut chaos = Chaos::new();
    let methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];
    let mut seen = std::collections::BTreeMap::<u16, usize>::new();
    for round in 0..1_500 {
        // Half the requests use the methods most routes take.
        let method = match chaos.below(2) {
            0 => pick(&mut chaos, &["GET", "POST"]),
            _ => pick(&mut chaos, &methods),
        };
        let mut path = pick(&mut chaos, &ROUTES).to_string();
        while path.contains("{name}") {
            let replacement = name(&mut chaos);
            path = path.replacen("{name}", &replacement, 1);
        }
        let token = match chaos.below(5) {
            0 => None,
            1 => Some(admin.clone()),
            2 => Some(team_a.clone()),
            3 => Some(format!("sluice_team-c_{}", "0".repeat(64))),
            _ => Some("x".repeat(chaos.below(3_000) as usize)),
        };
        let mut request = http.request(
            reqwest::Method::from_bytes(method.as_bytes()).expect("method"),
            format!("{}{path}", server.url),
        );
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let content_type = pick(
            &mut chaos,
            &[
                "application/json",
                "text/plain",
                "application/wasm",
                "",
                "multipart/form-data",
            ],
        );
        if !content_type.is_empty() {
            request = request.header("content-type", content_type);
        }
        if chaos.below(10) == 0 {
            request = request.header("x-padding", "p".repeat(chaos.below(100_000) as usize));
        }
        let status = match request.body(body(&mut chaos)).send() {
            Ok(response) => response.status().as_u16(),
            // The server may close a connection whose head is too large.
            Err(error) if error.is_request() || error.is_connect() => continue,
            Err(error) => panic!("round {round}: {method} {path}: {error}"),
        };
        *seen.entry(status).or_default() += 1;
        assert!(
            DOCUMENTED.contains(&status),
            "round {round}: {method} {path} answered {status}"
        );
    }
    for _ in 0..200 {
        let request = raw_request(&mut chaos, port);
        if let Some(status) = raw_status(port, &request) {
            *seen.entry(status).or_default() += 1;
            assert!(
                DOCUMENTED.contains(&status),
                "a raw request answered {status}"
            );
        }
    }
    eprintln!("statuses seen: {seen:?}");
    assert!(
        seen.keys().filter(|s| **s >= 400).count() >= 5,
        "the fuzz reached few refusals: {seen:?}"
    );
    let health = http
        .get(format!("{}/healthz", server.url))
        .send()
        .expect("healthz");
    assert_eq!(health.status().as_u16(), 200);
    assert_eq!(state(&watched, "steady")["state"], "running");
    let after = records_in(&watched, "steady");
    wait_until("team-c's pipeline to go on", WAIT, || {
        records_in(&watched, "steady") > after
    });
    assert!(after > before, "team-c's pipeline went on during the fuzz");
    let audit = std::fs::read_to_string(state_dir.path().join("audit.jsonl")).expect("audit log");
    assert!(
        audit.lines().count() > 100,
        "the fuzz's actions and refusals are audited"
    );
    assert!(
        !audit.contains(&team_a) && !audit.contains(&admin),
        "no token in the audit log"
    );
}

/// A load of 1,000 mixed requests from 10 tenants at once, each with a
/// running pipeline: no 5xx, and every pipeline runs on throughout.
#[test]
fn a_thousand_mixed_requests_from_ten_tenants_get_no_5xx_while_pipelines_run() {
    let state_dir = tempfile::tempdir().expect("state dir");
    let (server, admin) = start_server(state_dir.path(), free_port());
    let admin = admin.expect("admin token");
    let files = tempfile::tempdir().expect("files");
    let tenants: Vec<(String, String)> = (0..10)
        .map(|i| {
            let tenant = format!("t{i}");
            let token = create_tenant_with(&server, &admin, &tenant, &[]);
            (tenant, token)
        })
        .collect();
    for (_, token) in &tenants {
        deploy_steady(&server, token, files.path(), "steady");
    }
    let url = server.url.clone();
    let started = std::time::Instant::now();
    let workers: Vec<_> = tenants
        .iter()
        .enumerate()
        .map(|(index, (_, token))| {
            let (url, token) = (url.clone(), token.clone());
            let other = format!("t{}", (index + 1) % 10);
            std::thread::spawn(move || {
                let http = reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(120))
                    .build()
                    .expect("client");
                let mut statuses = Vec::new();
                for i in 0..100 {
                    let request = match i % 10 {
                        0 => http.get(format!("{url}/api/v1/pipelines")),
                        1 => http.get(format!("{url}/api/v1/pipelines/steady")),
                        2 => http.get(format!("{url}/api/v1/pipelines/steady/status")),
                        3 => http.get(format!("{url}/metrics")),
                        4 => http.get(format!("{url}/api/v1/pipelines/steady/logs")),
                        5 => http.get(format!("{url}/api/v1/pipelines/steady/checkpoints")),
                        6 => http
                            .post(format!("{url}/api/v1/pipelines"))
                            .body(format!("[pipeline]\nname = \"bad\"\n[source.kafka]\nbootstrap_servers = \"x:1\"\ntopics = [\"{other}.t\"]\ngroup_id = \"g\"\n[sink.blackhole]\n")),
                        7 => http.post(format!("{url}/api/v1/plugins")).body(vec![0u8; 512]),
                        8 => http.get(format!("{url}/api/v1/status")),
                        _ => http.delete(format!("{url}/api/v1/pipelines/{other}-steady")),
                    };
                    let status = request
                        .bearer_auth(&token)
                        .send()
                        .map(|r| r.status().as_u16())
                        .unwrap_or_else(|e| panic!("{e}"));
                    statuses.push(status);
                }
                statuses
            })
        })
        .collect();
    let mut seen = std::collections::BTreeMap::<u16, usize>::new();
    for worker in workers {
        for status in worker.join().expect("worker") {
            *seen.entry(status).or_default() += 1;
        }
    }
    eprintln!(
        "1,000 requests from 10 tenants in {:.1} s: {seen:?}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(seen.values().sum::<usize>(), 1_000);
    assert!(seen.keys().all(|s| DOCUMENTED.contains(s)), "{seen:?}");
    assert_eq!(
        seen.get(&200).copied().unwrap_or(0),
        700,
        "every read answered: {seen:?}"
    );
    // Changes beyond the burst are refused with a time to retry.
    let http = reqwest::blocking::Client::new();
    let refused = (0..150)
        .map(|_| {
            http.post(format!("{url}/api/v1/plugins"))
                .bearer_auth(&tenants[0].1)
                .body(vec![0u8; 16])
                .send()
                .expect("send")
        })
        .filter(|r| r.status().as_u16() == 429)
        .inspect(|r| assert!(r.headers().contains_key("retry-after")))
        .count();
    assert!(refused > 0, "150 changes at once were all taken");
    let reader = http
        .get(format!("{url}/api/v1/pipelines"))
        .bearer_auth(&tenants[0].1)
        .send()
        .expect("send");
    assert_eq!(reader.status().as_u16(), 200, "reads are not rate-limited");
    for (_, token) in &tenants {
        let api = client(&server, Some(token));
        assert_eq!(state(&api, "steady")["state"], "running");
        let now = records_in(&api, "steady");
        wait_until("each pipeline to go on", WAIT, || {
            records_in(&api, "steady") > now
        });
    }
}

/// Slow clients (slowloris: a request head sent a byte at a time, then
/// nothing) neither hold the server's threads nor stay connected: while
/// 200 of them hang, other requests are answered, and the server closes
/// each of them once its head has taken too long.
#[test]
fn slow_clients_are_cut_off_and_hold_up_no_one() {
    let state_dir = tempfile::tempdir().expect("state dir");
    let port = free_port();
    let (server, _) = start_server(state_dir.path(), port);
    let slow: Vec<std::net::TcpStream> = (0..200)
        .map(|_| {
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
            stream
                .write_all(b"POST /api/v1/pipelines HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                .expect("write");
            stream
        })
        .collect();
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    for _ in 0..20 {
        let answer = http
            .get(format!("{}/healthz", server.url))
            .send()
            .expect("answered beside 200 slow clients");
        assert_eq!(answer.status().as_u16(), 200);
    }
    for mut stream in slow {
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        let mut answer = Vec::new();
        let read = stream.read_to_end(&mut answer);
        assert!(
            read.is_ok(),
            "the server closed a slow client's connection (read: {read:?})"
        );
        let text = String::from_utf8_lossy(&answer);
        assert!(
            text.is_empty() || text.starts_with("HTTP/1.1 408"),
            "{text}"
        );
    }
}

/// The caller's mistakes are 400s, the server's own failures 500s: a
/// pipeline whose directory cannot be made (a file stands where it goes)
/// is a 500 naming the server's trouble, and nothing of it is left.
#[test]
fn a_server_side_failure_is_a_500_not_a_400() {
    let state_dir = tempfile::tempdir().expect("state dir");
    let (server, admin) = start_server(state_dir.path(), free_port());
    let token = create_tenant_with(&server, &admin.expect("admin token"), "team", &[]);
    let http = reqwest::blocking::Client::new();
    let create = |text: &str| {
        let response = http
            .post(format!("{}/api/v1/pipelines", server.url))
            .bearer_auth(&token)
            .body(text.to_string())
            .send()
            .expect("send");
        (
            response.status().as_u16(),
            response.text().unwrap_or_default(),
        )
    };
    let (status, text) =
        create("[pipeline]\nname = \"p\"\n[source.generator]\ncount = 1\n[sink.stdout]\n");
    assert_eq!(status, 400, "a tenant's mistake: {text}");
    let pipelines = state_dir.path().join("tenants/team/pipelines");
    std::fs::create_dir_all(&pipelines).expect("dir");
    std::fs::write(pipelines.join("blocked"), "a file where the directory goes").expect("write");
    let (status, text) = create(&steady_pipeline("blocked"));
    assert_eq!(status, 500, "the server's failure: {text}");
    assert!(text.contains("creating"), "{text}");
    assert_no_pipelines(&server, &token);
}
