//! schemathesis (PyPI) fuzzes every route of the running appliance from its own OpenAPI
//! document, authenticated as admin: no server error, and every response must match the
//! status codes, content types, headers and schemas the document declares.
//!
//! Checks run: not_a_server_error, status_code_conformance, content_type_conformance,
//! response_headers_conformance, response_schema_conformance, and the stateful phase.
//! Left out: positive_data_acceptance (semantic rules, like "the referenced user must
//! exist", cannot be written as JSON Schema) and negative_data_rejection (schemathesis
//! mutates the Authorization header we pass with -H and then reports the unmutated,
//! valid request as accepted). `DELETE /tokens/{id}` is excluded because the fuzzer would
//! revoke its own token and spend the rest of the run on 401s; the token tests cover it.

use std::process::Command;

use quarry_tests::QuarryProcess;
use serde_json::json;

/// Examples per operation and phase: enough to find real bugs, small enough for CI.
const MAX_EXAMPLES: &str = "25";

#[test]
fn schemathesis_finds_no_server_errors_or_schema_violations() {
    let q = QuarryProcess::start().unwrap();
    let admin = q.admin().unwrap();
    let (status, tok) = admin
        .post("/api/v1/tokens", &json!({"name": "schemathesis"}))
        .unwrap();
    assert_eq!(status, 201);
    let token = tok["token"].as_str().unwrap();
    let report = tempfile::tempdir().unwrap();
    let out = Command::new("schemathesis")
        .arg("run")
        .arg(format!("{}/api/v1/openapi.json", q.url()))
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance",
        ])
        .args(["--max-examples", MAX_EXAMPLES, "--workers", "2", "--seed", "20261122"])
        .args(["--exclude-name", "DELETE /api/v1/tokens/{id}"])
        .args(["--report", "junit", "--report-dir"])
        .arg(report.path())
        .env("NO_COLOR", "1")
        .output()
        .expect("schemathesis is not installed: run the README's test command, which installs it");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "schemathesis reported failures:\n{stdout}\n{stderr}\n--- appliance log ---\n{}",
        q.log_text()
    );
    assert!(
        stdout.contains("generated"),
        "schemathesis ran no test cases:\n{stdout}"
    );
    // The fuzzer's token must still work: the run exercised the API, not a wall of 401s.
    // (Its login session may be gone: a fuzzed password change ends sessions, by design.)
    let fuzzer = quarry_tests::Api::with_token(&q, token);
    assert_eq!(fuzzer.get("/api/v1/shares").unwrap().0, 200);
}
