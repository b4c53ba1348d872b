// Browser acceptance test of Quarry's web UI (issue 6): playwright-core drives Debian's
// chromium against a running `quarry serve` started by tests/suites/webui.sh, which passes
// QUARRY_URL, QUARRY_SMB_PORT, QUARRY_ADMIN_PASSWORD and WEBUI_ARTIFACTS.
//
// Logs in, creates users and a share with a quota through the forms, writes to the share
// over SMB (smbclient) while watching the dashboard's live throughput and the share's
// usage bar move, disconnects a live SMB session from the sessions page, acknowledges an
// event, checks that a viewer sees no mutating form and that forged posts get 403, and
// screenshots every page. Exits non-zero when any check fails.

import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const BASE = need("QUARRY_URL");
const SMB_PORT = need("QUARRY_SMB_PORT");
const ADMIN_PASSWORD = need("QUARRY_ADMIN_PASSWORD");
const ARTIFACTS = need("WEBUI_ARTIFACTS");
const SHARE = "media";
const SMB_USER = "smbuser";
const SMB_PASS = "smb-secret-123";
const VIEWER = "watcher";
const VIEWER_PASS = "viewer-secret-123";
const FILE_MIB = 16;
const DISTINCT_FILES = 8; // 128 MiB, under the share's 200 MiB quota

function need(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`webui test: ${name} is not set`);
    process.exit(2);
  }
  return v;
}

let passed = 0;
let failed = 0;
function check(ok, what) {
  if (ok) {
    passed++;
    console.log(`ok   ${what}`);
  } else {
    failed++;
    console.log(`FAIL ${what}`);
  }
  return ok;
}

const sleep = ms => new Promise(r => setTimeout(r, ms));

async function shot(page, name) {
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
}

async function heading(page) {
  return (await page.locator("main h1").first().textContent())?.trim();
}

// Runs smbclient once with `cmds`; resolves with its exit code and output.
function smbclient(cmds, cwd) {
  return new Promise(resolve => {
    const child = spawn("smbclient", [`//127.0.0.1/${SHARE}`, "-p", SMB_PORT,
      "-U", `${SMB_USER}%${SMB_PASS}`, "-m", "SMB3_11", "-c", cmds], { cwd });
    let out = "";
    child.stdout.on("data", d => (out += d));
    child.stderr.on("data", d => (out += d));
    child.on("close", code => resolve({ code, out }));
  });
}

// Writes FILE_MIB-sized files over SMB in a loop until stopped (or 90 s pass).
function startWriter(dir) {
  const state = { stop: false, puts: 0, errors: [], done: null };
  state.done = (async () => {
    const until = Date.now() + 90_000;
    let i = 0;
    while (!state.stop && Date.now() < until) {
      const name = `f${i % DISTINCT_FILES}.bin`;
      const r = await smbclient(`put payload.bin ${name}`, dir);
      if (r.code === 0) state.puts++;
      else {
        state.errors.push(r.out.trim());
        if (state.errors.length > 3) break;
        await sleep(300);
      }
      i++;
    }
  })();
  return state;
}

async function apiJson(ctx, path) {
  const r = await ctx.request.get(BASE + path);
  if (!r.ok()) throw new Error(`GET ${path}: ${r.status()}`);
  return r.json();
}

async function login(page, user, password) {
  await page.goto(BASE + "/");
  await page.fill('input[name="username"]', user);
  await page.fill('input[name="password"]', password);
  await Promise.all([page.waitForURL(BASE + "/"), page.click('button[type="submit"]')]);
}

async function main() {
  mkdirSync(ARTIFACTS, { recursive: true });
  const work = mkdtempSync(join(tmpdir(), "quarry-webui-"));
  writeFileSync(join(work, "payload.bin"), Buffer.alloc(FILE_MIB << 20, 0x5a));
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu"],
  });
  let idle = null;
  try {
    const admin = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await admin.newPage();
    page.on("dialog", d => d.accept());
    page.on("pageerror", e => check(false, `no script error on ${page.url()}: ${e.message}`));

    // Login page, a wrong password, then the real one.
    await page.goto(BASE + "/");
    check(await page.locator("#login-form").isVisible(), "GET / shows the login page when not logged in");
    await shot(page, "01-login");
    await page.fill('input[name="username"]', "admin");
    await page.fill('input[name="password"]', "not-the-password");
    await page.click('button[type="submit"]');
    check((await page.locator("#problem").getAttribute("data-status")) === "401",
      "a wrong password shows the API's 401 problem on the login page");
    await shot(page, "02-login-failed");
    await login(page, "admin", ADMIN_PASSWORD);
    check(await heading(page) === "Dashboard", "logging in shows the dashboard");

    // Users: an SMB-only user for the share, a viewer; a too-short password is refused.
    await page.goto(BASE + "/ui/users");
    for (const [name, pass, role] of [[SMB_USER, SMB_PASS, ""], [VIEWER, VIEWER_PASS, "viewer"]]) {
      await page.fill('#user-form input[name="name"]', name);
      await page.fill('#user-form input[name="password"]', pass);
      await page.selectOption('#user-form select[name="role"]', role);
      await page.click('#user-form button[type="submit"]');
      check(await page.locator(`tr[data-user="${name}"]`).count() === 1, `user ${name} created from the form`);
    }
    await page.fill('#user-form input[name="name"]', "shorty");
    await page.fill('#user-form input[name="password"]', "x");
    await page.evaluate(() => document.querySelector('#user-form input[name="password"]').removeAttribute("minlength"));
    await page.click('#user-form button[type="submit"]');
    const userProblem = await page.locator("#problem").getAttribute("data-status").catch(() => null);
    check(userProblem === "422", `a too-short password shows the API's 422 problem (got ${userProblem})`);
    // Edit a user: SMB-only "temp" becomes an operator with a new password.
    await page.goto(BASE + "/ui/users");
    await page.fill('#user-form input[name="name"]', "temp");
    await page.fill('#user-form input[name="password"]', "temp-first-pass");
    await page.selectOption('#user-form select[name="role"]', "");
    await page.click('#user-form button[type="submit"]');
    const urow = page.locator('tr[data-user="temp"]');
    await urow.locator("details.edit-user summary").click();
    await urow.locator('form.user-edit-form select[name="role"]').selectOption("operator");
    await urow.locator('form.user-edit-form input[name="password"]').fill("temp-second-pass");
    await urow.locator('form.user-edit-form button[type="submit"]').click();
    await page.waitForURL(BASE + "/ui/users");
    const temp = (await apiJson(admin, "/api/v1/users")).find(u => u.name === "temp");
    // A cookie-less request: the admin context's cookie jar must keep the admin session.
    const relog = await fetch(BASE + "/api/v1/auth/login", {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ username: "temp", password: "temp-second-pass" }),
    });
    check(temp !== undefined && temp.role === "operator" && relog.status === 200,
      `editing a user sets the role and the password (${temp && temp.role}, login ${relog.status})`);
    await shot(page, "03-users");

    // Shares: one with a quota; an invalid name shows the API's problem details.
    await page.goto(BASE + "/ui/shares");
    await page.fill('#share-form input[name="name"]', "bad/name");
    await page.click('#share-form button[type="submit"]');
    const shareProblem = await page.locator("#problem").getAttribute("data-status").catch(() => null);
    check(shareProblem === "422", `an invalid share name shows the API's 422 problem (got ${shareProblem})`);
    await page.goto(BASE + "/ui/shares");
    await page.fill('#share-form input[name="name"]', SHARE);
    await page.fill('#share-form input[name="quota"]', "200 MiB");
    await page.fill('#share-form input[name="users"]', SMB_USER);
    await page.click('#share-form button[type="submit"]');
    const row = page.locator(`tr[data-share="${SHARE}"]`);
    check(await row.count() === 1, "the new share is in the list");
    check((await row.textContent()).includes("of 200 MiB"), "the share's row shows its 200 MiB quota");
    const used0 = Number(await row.getAttribute("data-used"));

    // Write over SMB; the usage bar grows without a reload (app.js polls the API).
    const writer = startWriter(work);
    try {
      await page.waitForFunction(
        ([name, min]) => {
          const r = document.querySelector(`tr[data-share="${name}"]`);
          return r && Number(r.dataset.used) > min + (32 << 20) && r.querySelector("meter").value > 0;
        }, [SHARE, used0], { timeout: 45_000, polling: 250 });
      check(true, "the share's usage bar grows while data is written over SMB");
    } catch {
      check(false, `the share's usage bar grows (writer: ${writer.puts} puts, ${writer.errors.join(" | ")})`);
    }
    await shot(page, "04-shares-usage");

    // The dashboard's live throughput figure and chart become non-zero.
    await page.goto(BASE + "/");
    try {
      await page.waitForFunction(() =>
        Number(document.getElementById("rate-total").dataset.bps) > 0 &&
        Number(document.getElementById("throughput-chart").dataset.peak) > 0,
      null, { timeout: 30_000, polling: 200 });
      check(true, "the dashboard's throughput figure and chart become non-zero during SMB writes");
    } catch {
      check(false, `the dashboard's throughput becomes non-zero (writer: ${writer.puts} puts)`);
    }
    const rateText = await page.locator("#rate-total").textContent();
    check(/\d/.test(rateText) && !/^0 B/.test(rateText.trim()), `the dashboard shows a rate to people (${rateText.trim()})`);
    await shot(page, "05-dashboard-live");
    // Operations and latency follow the same traffic: the ops chart rises, the latency
    // table counts SMB writes with percentiles, the share's traffic row shows the bytes.
    try {
      await page.waitForFunction(() => {
        const pts = (document.getElementById("chart-ops").getAttribute("points") || "").split(" ");
        return pts.some(p => Number(p.split(",")[1]) < 99);
      }, null, { timeout: 15_000, polling: 200 });
      check(true, "the dashboard's operations chart rises during SMB writes");
    } catch {
      check(false, "the dashboard's operations chart rises during SMB writes");
    }
    const cells = async sel => page.$$eval(sel, rows => rows.map(r => [...r.cells].map(c => c.textContent.trim())));
    const lat = (await cells("#latency tbody tr")).find(r => r[0] === "SMB" && r[1] === "write");
    check(lat !== undefined && Number(lat[2]) > 0 && /\d/.test(lat[3]) && /\d/.test(lat[4]),
      `the latency table shows SMB write percentiles (${lat && lat.join(" | ")})`);
    const traffic = (await cells("#share-traffic tbody tr")).find(r => r[0] === SHARE);
    check(traffic !== undefined && /\d/.test(traffic[2]) && !/^0 B$/.test(traffic[2]),
      `the dashboard lists the share's written bytes (${traffic && traffic.join(" | ")})`);
    await page.click('button[data-window="1d"]');
    try {
      await page.waitForFunction(() => document.getElementById("window-title").textContent === "Last day",
        null, { timeout: 5_000, polling: 100 });
      check(true, "the chart window switches to the last day (1 min samples)");
    } catch {
      check(false, "the chart window switches to the last day (1 min samples)");
    }
    await page.click('button[data-window="5m"]');
    writer.stop = true;
    await writer.done;
    check(writer.puts >= 2 && writer.errors.length === 0,
      `smbclient wrote ${writer.puts} × ${FILE_MIB} MiB without errors ${writer.errors.join(" | ")}`);

    // The page works before any script loads: the server renders the dashboard's figures.
    const nojs = await browser.newContext({ javaScriptEnabled: false, viewport: { width: 1280, height: 800 } });
    await nojs.addCookies(await admin.cookies());
    const np = await nojs.newPage();
    await np.goto(BASE + "/");
    check(Number(await np.locator("#throughput-chart").getAttribute("data-peak")) > 0,
      "without JavaScript the dashboard's server-rendered chart shows the traffic");
    await np.goto(BASE + "/ui/shares");
    check(Number(await np.locator(`tr[data-share="${SHARE}"]`).getAttribute("data-used")) > 0,
      "without JavaScript the shares page shows the usage");
    await nojs.close();

    // A live SMB session (smbclient waiting on its stdin), disconnected from the UI.
    idle = spawn("smbclient", [`//127.0.0.1/${SHARE}`, "-p", SMB_PORT, "-U", `${SMB_USER}%${SMB_PASS}`, "-m", "SMB3_11"],
      { stdio: ["pipe", "ignore", "ignore"] });
    let session = null;
    for (let i = 0; i < 50 && !session; i++) {
      const list = await apiJson(admin, "/api/v1/sessions");
      session = list.find(s => s.protocol === "smb" && s.user.toLowerCase() === SMB_USER);
      if (!session) await sleep(200);
    }
    if (check(session !== null && session !== undefined, "the idle smbclient session is listed by /api/v1/sessions")) {
      await page.goto(BASE + "/ui/sessions");
      const srow = page.locator(`tr[data-session="${session.id}"]`);
      check(await srow.count() === 1, "the sessions page lists the live SMB session");
      await shot(page, "06-sessions");
      await srow.locator('button:has-text("Disconnect")').click();
      await page.waitForURL(BASE + "/ui/sessions");
      let gone = false;
      for (let i = 0; i < 50 && !gone; i++) {
        gone = !(await apiJson(admin, "/api/v1/sessions")).some(s => s.id === session.id);
        if (!gone) await sleep(200);
      }
      check(gone, "after Disconnect the session is gone from /api/v1/sessions");
      check(await page.locator(`tr[data-session="${session.id}"]`).count() === 0, "the sessions page no longer lists it");
      await shot(page, "07-sessions-after-disconnect");
    }

    // Events: a failed login raises one; acknowledge it from the events page.
    await admin.request.post(BASE + "/api/v1/auth/login", { data: { username: "mallory", password: "guess-guess" } });
    await page.goto(BASE + "/ui/events");
    const ev = page.locator("tr[data-event]", { hasText: "mallory" }).first();
    if (check(await ev.count() === 1, "the failed login is listed on the events page")) {
      await ev.locator('button:has-text("Acknowledge")').click();
      await page.waitForURL(BASE + "/ui/events");
      const evAfter = page.locator("tr[data-event]", { hasText: "mallory" }).first();
      check((await evAfter.textContent()).includes("acknowledged by admin"), "acknowledging marks the event acknowledged");
    }
    await shot(page, "08-events");

    // Edit a share's access from its row: read-only, one user; the REST API agrees.
    await page.goto(BASE + "/ui/shares");
    const arow = page.locator(`tr[data-share="${SHARE}"]`);
    await arow.locator("details.edit-access summary").click();
    const aform = arow.locator("form.access-form");
    await aform.locator('input[name="users"]').fill(SMB_USER);
    await aform.locator('input[name="read_only"]').check();
    await aform.locator('button[type="submit"]').click();
    await page.waitForURL(BASE + "/ui/shares");
    const edited = (await apiJson(admin, "/api/v1/shares")).find(s => s.name === SHARE);
    check(edited !== undefined && edited.read_only === true && edited.users.length === 1 &&
      edited.users[0].toLowerCase() === SMB_USER.toLowerCase(),
      `editing access sets read-only and the user list (${JSON.stringify(edited && { ro: edited.read_only, users: edited.users })})`);
    check(await page.locator(`tr[data-share="${SHARE}"] .badge:has-text("read-only")`).count() === 1,
      "the shares page shows the share read-only");

    // Volumes: create, a refused size shows the API's problem, grow, delete.
    await page.goto(BASE + "/ui/volumes");
    await page.fill('#volume-form input[name="name"]', "vol1");
    await page.fill('#volume-form input[name="size"]', "64 MiB");
    await page.click('#volume-form button[type="submit"]');
    await page.waitForURL(BASE + "/ui/volumes");
    let vol = (await apiJson(admin, "/api/v1/volumes")).find(v => v.name === "vol1");
    check(vol !== undefined && vol.size_bytes === 64 << 20, `the volume form creates vol1 of 64 MiB (${vol && vol.size_bytes})`);
    await page.fill('#volume-form input[name="name"]', "vol2");
    await page.fill('#volume-form input[name="size"]', "1000 bytes");
    await page.click('#volume-form button[type="submit"]');
    const vproblem = page.locator("#problem");
    check(await vproblem.count() === 1 && /\S/.test(await vproblem.textContent()),
      `a refused volume size shows the API's problem detail (${await vproblem.count() ? (await vproblem.textContent()).trim().slice(0, 80) : "none"})`);
    check((await apiJson(admin, "/api/v1/volumes")).every(v => v.name !== "vol2"), "the refused volume was not created");
    await page.goto(BASE + "/ui/volumes");
    const vrow = page.locator('tr[data-volume="vol1"]');
    await vrow.locator('input[name="size"]').fill("128 MiB");
    await vrow.locator('button:has-text("Grow")').click();
    await page.waitForURL(BASE + "/ui/volumes");
    vol = (await apiJson(admin, "/api/v1/volumes")).find(v => v.name === "vol1");
    check(vol !== undefined && vol.size_bytes === 128 << 20, `Grow makes vol1 128 MiB (${vol && vol.size_bytes})`);
    await page.locator('tr[data-volume="vol1"] button:has-text("Delete")').click();
    await page.waitForURL(BASE + "/ui/volumes");
    check((await apiJson(admin, "/api/v1/volumes")).every(v => v.name !== "vol1"), "Delete removes vol1");

    // NVMe: a subsystem with an allowed host, a namespace over a volume made from the
    // page, hosts opened to any host, the namespace removed, the subsystem deleted.
    // Characters that would end or split a URL path segment: the forms must escape them.
    const NQN = "nqn.2026-01.io.quarry:webui/a?b#c%d";
    const HOSTNQN = "nqn.2014-08.org.nvmexpress:uuid:0f6c1e7a-0000-4000-8000-000000000001";
    await page.goto(BASE + "/ui/volumes");
    await page.fill('#volume-form input[name="name"]', "nvol");
    await page.fill('#volume-form input[name="size"]', "16 MiB");
    await page.click('#volume-form button[type="submit"]');
    await page.waitForURL(BASE + "/ui/volumes");
    await page.fill('#subsystem-form input[name="nqn"]', NQN);
    await page.fill('#subsystem-form input[name="hosts"]', HOSTNQN);
    await page.click('#subsystem-form button[type="submit"]');
    await page.waitForURL(BASE + "/ui/volumes");
    const srow = page.locator(`tr[data-nqn="${NQN}"]`);
    await srow.locator('form.ns-form input[name="volume"]').fill("nvol");
    await srow.locator('form.ns-form button[type="submit"]').click();
    await page.waitForURL(BASE + "/ui/volumes");
    const sub = async () => (await apiJson(admin, "/api/v1/nvme/subsystems")).find(x => x.nqn === NQN);
    let ss = await sub();
    check(ss !== undefined && !ss.allow_any_host && ss.hosts.length === 1 && ss.hosts[0] === HOSTNQN &&
      ss.namespaces.length === 1 && ss.namespaces[0].volume === "nvol",
      `the NVMe forms create a subsystem with its host and a namespace on nvol (${JSON.stringify(ss)})`);
    await page.locator(`tr[data-nqn="${NQN}"] details.edit-hosts summary`).click();
    await page.locator(`tr[data-nqn="${NQN}"] form.hosts-form input[name="allow_any_host"]`).check();
    await page.locator(`tr[data-nqn="${NQN}"] form.hosts-form button[type="submit"]`).click();
    await page.waitForURL(BASE + "/ui/volumes");
    ss = await sub();
    check(ss !== undefined && ss.allow_any_host === true, "Edit hosts opens the subsystem to any host");
    await shot(page, "10b-volumes-nvme");
    await page.locator(`tr[data-nqn="${NQN}"] button:has-text("remove")`).click();
    await page.waitForURL(BASE + "/ui/volumes");
    ss = await sub();
    check(ss !== undefined && ss.namespaces.length === 0, "remove takes the namespace away");
    await page.locator(`tr[data-nqn="${NQN}"] button:has-text("Delete")`).click();
    await page.waitForURL(BASE + "/ui/volumes");
    check(await sub() === undefined, "Delete removes the subsystem");

    // API tokens: created from the page, the secret shown once and working, then revoked.
    await page.goto(BASE + "/ui/tokens");
    await page.fill('#token-form input[name="name"]', "ci-bot");
    await page.fill('#token-form input[name="days"]', "30");
    await page.click('#token-form button[type="submit"]');
    const secret = (await page.locator("#new-token-secret").textContent().catch(() => "")).trim();
    const me = await admin.request.get(BASE + "/api/v1/auth/me", { headers: { Authorization: `Bearer ${secret}` } });
    check(secret.length >= 20 && me.status() === 200, `a created token is shown once and authenticates (${me.status()})`);
    await page.goto(BASE + "/ui/tokens");
    check(await page.locator("#new-token-secret").count() === 0 && !(await page.content()).includes(secret),
      "the token's secret is not shown again");
    const trow = page.locator('tr[data-name="ci-bot"]');
    check(await trow.count() === 1, "the tokens page lists ci-bot");
    await trow.locator('button:has-text("Revoke")').click();
    await page.waitForURL(BASE + "/ui/tokens");
    const revoked = await admin.request.get(BASE + "/api/v1/auth/me", { headers: { Authorization: `Bearer ${secret}` } });
    check(revoked.status() === 401 && await page.locator('tr[data-name="ci-bot"]').count() === 0,
      `a revoked token no longer authenticates (${revoked.status()})`);
    await page.fill('#token-form input[name="name"]', "bad-days");
    await page.fill('#token-form input[name="days"]', "soon");
    await page.click('#token-form button[type="submit"]');
    check(await page.locator("#problem").count() === 1, "a bad expiry shows the problem detail");

    // The read-only pages render for an admin.
    for (const [path, name] of [["/ui/pool", "09-pool"], ["/ui/volumes", "10-volumes"],
      ["/ui/snapshots", "11-snapshots"], ["/ui/tokens", "12-tokens"]]) {
      const r = await page.goto(BASE + path);
      check(r.status() === 200 && (await page.locator("#problem").count()) === 0, `${path} renders`);
      await shot(page, name);
    }

    // A forged post without the CSRF field is refused even for an admin.
    const noCsrf = await admin.request.post(BASE + "/ui/shares", { form: { name: "forged" }, maxRedirects: 0 });
    check(noCsrf.status() === 403, `an admin post without the CSRF field gets 403 (got ${noCsrf.status()})`);

    // Phone width and dark mode.
    const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, colorScheme: "dark", isMobile: true });
    await phone.addCookies(await admin.cookies());
    const pp = await phone.newPage();
    for (const [path, name] of [["/", "13-phone-dark-dashboard"], ["/ui/shares", "14-phone-dark-shares"]]) {
      await pp.goto(BASE + path);
      const overflow = await pp.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      check(overflow <= 1, `${path} fits a 390 px phone screen (overflow ${overflow} px)`);
      await shot(pp, name);
    }
    await phone.close();

    // A viewer: no mutating forms or buttons anywhere; forged posts get 403.
    const vctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const vp = await vctx.newPage();
    await login(vp, VIEWER, VIEWER_PASS);
    for (const path of ["/", "/ui/shares", "/ui/users", "/ui/sessions", "/ui/events", "/ui/pool",
      "/ui/volumes", "/ui/snapshots", "/ui/tokens"]) {
      await vp.goto(BASE + path);
      const forms = await vp.locator('form[method="post"]:not(#logout-form)').count();
      // Buttons of type "button" only drive the page's own view (the chart window) and
      // cannot send anything; every other button submits a form.
      const buttons = await vp.locator('button:not(#logout-form button):not([type="button"])').count();
      check(forms === 0 && buttons === 0, `viewer sees no mutating form or button on ${path} (${forms} forms, ${buttons} buttons)`);
    }
    await vp.goto(BASE + "/ui/users");
    const seen = await vp.locator("tr[data-user]").evaluateAll(rows => rows.map(r => r.dataset.user));
    check(seen.length === 1 && seen[0] === VIEWER, `a viewer sees only their own user (${seen.join(",")})`);
    await shot(vp, "15-viewer-users");
    await vp.goto(BASE + "/ui/shares");
    await shot(vp, "16-viewer-shares");
    const csrf = await vp.locator('#logout-form input[name="csrf"]').getAttribute("value");
    const forged = [
      ["/ui/shares", { csrf, name: "evil" }],
      [`/ui/shares/${SHARE}/delete`, { csrf }],
      [`/ui/shares/${SHARE}/quota`, { csrf, quota: "1 MiB" }],
      [`/ui/shares/${SHARE}/access`, { csrf, users: "" }],
      ["/ui/volumes", { csrf, name: "evil", size: "64 MiB" }],
      ["/ui/volumes/vol1/resize", { csrf, size: "1 GiB" }],
      ["/ui/volumes/vol1/delete", { csrf }],
      ["/ui/nvme", { csrf, nqn: "nqn.2026-01.io.quarry:evil", allow_any_host: "on" }],
      ["/ui/volumes/nvol/delete", { csrf }],
      ["/ui/users", { csrf, name: "evil", password: "evil-evil-evil", role: "admin" }],
      [`/ui/users/${SMB_USER}/delete`, { csrf }],
      ["/ui/users/temp/edit", { csrf, role: "admin", password: "evil-evil-evil" }],
      ["/ui/sessions/1/disconnect", { csrf }],
      ["/ui/events/1/ack", { csrf }],
    ];
    for (const [path, form] of forged) {
      const r = await vctx.request.post(BASE + path, { form, maxRedirects: 0 });
      check(r.status() === 403, `a viewer's forged POST ${path} gets 403 (got ${r.status()})`);
    }
    const shares = await apiJson(admin, "/api/v1/shares");
    const share = shares.find(s => s.name === SHARE);
    check(shares.every(s => s.name !== "evil") && share && share.quota_bytes === 200 << 20 &&
      share.read_only === true && share.users.length === 1,
      "the viewer's forged posts changed nothing");
    await vctx.close();

    // Logging out ends the session.
    await page.goto(BASE + "/");
    await Promise.all([page.waitForURL(BASE + "/"), page.click('#logout-form button')]);
    check(await page.locator("#login-form").isVisible(), "logging out returns to the login page");
    const after = await admin.request.get(BASE + "/api/v1/auth/me");
    check(after.status() === 401, "the session cookie no longer authenticates after logout");
    await admin.close();
  } finally {
    if (idle) idle.kill();
    await browser.close();
    rmSync(work, { recursive: true, force: true });
  }
}

try {
  await main();
} catch (e) {
  check(false, `unexpected error: ${e.stack || e}`);
}
console.log(`screenshots in ${ARTIFACTS}`);
console.log(`webui: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
