// The Trocket console's page script: a hash router over the JSON API, no framework and no
// build step. Every text from the cluster goes into the page through textContent (el()), never
// as HTML, so a topic or a message body cannot inject markup.
"use strict";

const PAGE_SIZE = 20;
const CHART_SAMPLES = 60;
const CHART_EVERY_MS = 3000;
let chartTimer = null;

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// A page's content: optional parts are passed as null and left out.
function fill(main, ...children) {
  main.replaceChildren(...children.flat().filter((child) => child !== null && child !== undefined));
}

function showError(text) {
  const box = document.getElementById("error");
  box.textContent = text;
  box.hidden = !text;
}

function showAnswer(text) {
  const box = document.getElementById("answer");
  box.textContent = text;
  box.hidden = !text;
}

async function api(method, path, body) {
  const options = { method, headers: {} };
  if (body !== undefined) {
    options.body = JSON.stringify(body);
    options.headers["Content-Type"] = "application/json";
  }
  let response;
  try {
    response = await fetch(path, options);
  } catch (error) {
    throw new Error(`the console server did not answer: ${error.message}`);
  }
  let value;
  try {
    value = await response.json();
  } catch (error) {
    throw new Error(`the console server answered ${response.status} without JSON`);
  }
  if (!response.ok) {
    const error = new Error(value.error || `HTTP ${response.status}`);
    error.needsKey = Boolean(value.needsKey);
    throw error;
  }
  return value;
}

function confirmAction(text) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
  });
}

// A write action: ask first, then show what the broker answered (or why it refused).
async function act(question, run, after) {
  if (!(await confirmAction(question))) {
    showAnswer("Cancelled: nothing was sent.");
    return;
  }
  try {
    const result = await run();
    showError("");
    showAnswer(describe(result));
    if (after) await after(result);
  } catch (error) {
    showAnswer("");
    showError(error.message);
  }
}

function describe(result) {
  if (result && Array.isArray(result.answers)) return result.answers.join("\n");
  return Object.entries(result || {}).map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`).join("\n");
}

function table(columns, rows, options = {}) {
  const head = el("tr", {}, columns.map(([title]) => el("th", {}, title)));
  const body = rows.map((row) =>
    el("tr", {}, columns.map(([, render, numeric]) => el("td", numeric ? { class: "num" } : {}, render(row)))),
  );
  return el("table", options.id ? { id: options.id } : {}, el("thead", {}, head), el("tbody", {}, body));
}

// Long lists paginate: PAGE_SIZE rows and a pager; `render(rows)` draws one page.
function paged(rows, render) {
  const box = el("div", { class: "paged" });
  let page = 0;
  const pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
  const draw = () => {
    box.replaceChildren(
      render(rows.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE)),
      el(
        "div",
        { class: "pager" },
        el("button", { type: "button", class: "previous", onclick: () => { if (page > 0) { page--; draw(); } } }, "Previous"),
        el("span", { class: "page-of" }, `page ${page + 1} of ${pages} (${rows.length} rows)`),
        el("button", { type: "button", class: "next", onclick: () => { if (page < pages - 1) { page++; draw(); } } }, "Next"),
      ),
    );
  };
  draw();
  return box;
}

function link(hash, text) {
  return el("a", { href: hash }, text);
}

function time(ms) {
  return ms ? new Date(Number(ms)).toISOString().replace("T", " ").slice(0, 19) : "";
}

function form(fields, submitText, onSubmit, id) {
  const inputs = {};
  const node = el(
    "form",
    { class: "inline", id },
    fields.map(([name, label, value, type]) => {
      const input = type === "select"
        ? el("select", { name }, value.map((option) => el("option", { value: option[0] }, option[1])))
        : el("input", { name, value: value ?? "", type: type || "text" });
      inputs[name] = input;
      return el("label", {}, label, input);
    }),
    el("button", { type: "submit" }, submitText),
  );
  node.addEventListener("submit", (event) => {
    event.preventDefault();
    const values = {};
    for (const [name, input] of Object.entries(inputs)) values[name] = input.value;
    onSubmit(values);
  });
  return node;
}

// --- pages ------------------------------------------------------------------------------------

const samples = [];

function drawChart(canvas) {
  const context = canvas.getContext("2d");
  const { width, height } = canvas;
  context.clearRect(0, 0, width, height);
  const points = samples.slice(-CHART_SAMPLES);
  const top = Math.max(1, ...points.map((p) => Math.max(p.inTps, p.outTps)));
  context.fillStyle = "#667085";
  context.font = "12px system-ui";
  context.fillText(`${Math.round(top)} msgs/s`, 4, 12);
  const series = [["inTps", "#f28c28"], ["outTps", "#1f6feb"]];
  const lagTop = Math.max(1, ...points.map((p) => p.lag || 0));
  context.fillStyle = "#7a7f87";
  context.fillText(`lag ${Math.round(lagTop)} msgs`, width - 110, 12);
  context.strokeStyle = "#7a7f87";
  context.setLineDash([4, 3]);
  context.beginPath();
  points.forEach((point, index) => {
    const x = (index / Math.max(1, CHART_SAMPLES - 1)) * width;
    const y = height - ((point.lag || 0) / lagTop) * (height - 16);
    if (index === 0) context.moveTo(x, y);
    else context.lineTo(x, y);
  });
  context.stroke();
  context.setLineDash([]);
  for (const [key, colour] of series) {
    context.strokeStyle = colour;
    context.beginPath();
    points.forEach((point, index) => {
      const x = (index / Math.max(1, CHART_SAMPLES - 1)) * width;
      const y = height - (point[key] / top) * (height - 16);
      if (index === 0) context.moveTo(x, y);
      else context.lineTo(x, y);
    });
    context.stroke();
  }
}

async function totalLag() {
  try {
    return (await api("GET", "/api/groups")).reduce((sum, group) => sum + group.diff, 0);
  } catch (error) {
    return 0; // lag is a bonus on this chart; the cluster figures still draw
  }
}

function sample(cluster, lag) {
  const totals = cluster.brokers.reduce(
    (sum, b) => ({ put: sum.put + (b.putTotal || 0), get: sum.get + (b.getTotal || 0) }),
    { put: 0, get: 0 },
  );
  const last = samples[samples.length - 1];
  if (last) {
    const seconds = Math.max(0.001, (cluster.sampledAt - last.at) / 1000);
    samples.push({
      at: cluster.sampledAt,
      put: totals.put,
      get: totals.get,
      inTps: Math.max(0, (totals.put - last.put) / seconds),
      outTps: Math.max(0, (totals.get - last.get) / seconds),
      lag,
    });
  } else {
    samples.push({ at: cluster.sampledAt, put: totals.put, get: totals.get, inTps: 0, outTps: 0, lag });
  }
  if (samples.length > CHART_SAMPLES) samples.shift();
}

async function clusterPage(main) {
  const cluster = await api("GET", "/api/cluster");
  sample(cluster, await totalLag());
  const last = samples[samples.length - 1];
  const canvas = el("canvas", { id: "tps-chart", width: 640, height: 160 });
  const describeSample = (point) => `in ${point.inTps.toFixed(1)} msgs/s, out ${point.outTps.toFixed(1)} msgs/s, lag ${point.lag} messages`;
  const figures = el("p", { class: "muted", id: "tps-now" }, describeSample(last));
  fill(main, 
    el("h1", {}, "Cluster"),
    table(
      [
        ["Cluster", (b) => b.cluster],
        ["Broker", (b) => b.brokerName],
        ["BID", (b) => b.brokerId, true],
        ["Address", (b) => b.addr],
        ["Role", (b) => b.role || ""],
        ["State", (b) => b.state || ""],
        ["Messages in", (b) => b.putTotal ?? "", true],
        ["Messages out", (b) => b.getTotal ?? "", true],
        ["Stored bytes", (b) => b.storageBytes ?? "", true],
        ["Disk used", (b) => (b.diskRatio ? `${(100 * Number(b.diskRatio)).toFixed(1)} %` : "")],
        ["Connections", (b) => b.connections ?? "", true],
      ],
      cluster.brokers,
      { id: "brokers" },
    ),
    el("h2", {}, "Live: messages per second in (orange) and out (blue), consumer lag (grey, own scale)"),
    canvas,
    figures,
  );
  drawChart(canvas);
  chartTimer = setInterval(async () => {
    try {
      sample(await api("GET", "/api/cluster"), await totalLag());
      figures.textContent = describeSample(samples[samples.length - 1]);
      drawChart(canvas);
    } catch (error) {
      showError(error.message);
    }
  }, CHART_EVERY_MS);
}

async function topicsPage(main, params) {
  const kind = params.get("kind") || "";
  const query = params.get("q") || "";
  const rows = await api("GET", `/api/topics?kind=${encodeURIComponent(kind)}&q=${encodeURIComponent(query)}`);
  fill(main, 
    el("h1", {}, "Topics"),
    form(
      [
        ["kind", "Kind", [["", "all"], ["normal", "normal"], ["retry", "retry"], ["dlq", "dead-letter"], ["system", "system"]], "select"],
        ["q", "Name contains", query],
      ],
      "Filter",
      (values) => { location.hash = `#/topics?kind=${encodeURIComponent(values.kind)}&q=${encodeURIComponent(values.q)}`; },
      "topic-filter",
    ),
    paged(rows, (page) => table([["Topic", (r) => link(`#/topic/${encodeURIComponent(r.topic)}`, r.topic)], ["Kind", (r) => r.kind]], page, { id: "topics" })),
    el("h2", {}, "Create or update a topic"),
    form(
      [
        ["topic", "Topic", ""],
        ["writeQueueNums", "Write queues", "8", "number"],
        ["readQueueNums", "Read queues", "8", "number"],
        ["perm", "Permission", [["6", "read and write"], ["4", "read only"], ["2", "write only"]], "select"],
      ],
      "Create / update",
      (values) => act(
        `Create or update topic "${values.topic}" with ${values.writeQueueNums} write and ${values.readQueueNums} read queues on every master?`,
        () => api("POST", "/api/topics", values),
        () => route(),
      ),
      "topic-create",
    ),
  );
  const select = main.querySelector("#topic-filter select[name=kind]");
  select.value = kind;
}

async function topicPage(main, name) {
  const topic = await api("GET", `/api/topics/${encodeURIComponent(name)}`);
  const brokers = topic.route.brokerDatas || [];
  fill(main, 
    el("h1", {}, `Topic ${topic.topic}`, el("span", { class: "muted" }, ` (${topic.kind})`)),
    el("h2", {}, "Queues"),
    table(
      [
        ["Broker", (r) => r.brokerName],
        ["Queue", (r) => r.queueId, true],
        ["Min offset", (r) => r.minOffset, true],
        ["Max offset", (r) => r.maxOffset, true],
        ["Last updated", (r) => time(r.lastUpdateTimestamp)],
      ],
      topic.status,
      { id: "queues" },
    ),
    el("h2", {}, "Route"),
    table([["Broker", (b) => b.brokerName], ["Addresses", (b) => Object.entries(b.brokerAddrs).map(([id, a]) => `${id}: ${a}`).join(", ")]], brokers),
    el("h2", {}, "Consuming groups"),
    topic.groups.length
      ? table([["Group", (g) => link(`#/group/${encodeURIComponent(g.group)}`, g.group)], ["Lag", (g) => g.diff, true]], topic.groups, { id: "consuming" })
      : el("p", { class: "muted" }, "No group has committed an offset on this topic."),
    el("h2", {}, "Send a test message"),
    form(
      [["body", "Body", ""], ["tag", "Tag", ""], ["key", "Key", ""]],
      "Send",
      (values) => act(
        `Send a test message to "${topic.topic}"?`,
        () => api("POST", `/api/topics/${encodeURIComponent(topic.topic)}/messages`, values),
      ),
      "send-message",
    ),
    el("h2", {}, "Delete"),
    el(
      "button",
      {
        type: "button",
        class: "danger",
        id: "delete-topic",
        onclick: () => act(
          `Delete topic "${topic.topic}" from every broker and NameServer? Its messages stay in the log until its files expire, but no client can reach them.`,
          () => api("DELETE", `/api/topics/${encodeURIComponent(topic.topic)}`),
          () => { location.hash = "#/topics"; },
        ),
      },
      "Delete topic",
    ),
  );
}

async function groupsPage(main, params) {
  const query = params.get("q") || "";
  const rows = await api("GET", `/api/groups?q=${encodeURIComponent(query)}`);
  fill(main, 
    el("h1", {}, "Consumer groups"),
    form([["q", "Name contains", query]], "Filter", (values) => { location.hash = `#/groups?q=${encodeURIComponent(values.q)}`; }),
    paged(rows, (page) => table(
      [
        ["Group", (g) => link(`#/group/${encodeURIComponent(g.group)}`, g.group)],
        ["Topics", (g) => g.topics.join(", ")],
        ["Lag", (g) => g.diff, true],
      ],
      page,
      { id: "groups" },
    )),
  );
}

async function groupPage(main, name) {
  const group = await api("GET", `/api/groups/${encodeURIComponent(name)}`);
  fill(main, 
    el("h1", {}, `Consumer group ${group.group}`),
    el("p", { id: "group-lag" }, `Lag: ${group.diff} messages`),
    group.popInFlight ? el("p", { id: "group-pop-in-flight" }, `In flight (popped, not acked): ${group.popInFlight} messages`) : null,
    group.progressProblem ? el("p", { class: "muted" }, group.progressProblem) : null,
    el("h2", {}, "Progress per queue"),
    table(
      [
        ["Topic", (r) => r.topic],
        ["Broker", (r) => r.brokerName],
        ["Queue", (r) => r.queueId, true],
        ["Broker offset", (r) => r.brokerOffset, true],
        ["Consumer offset", (r) => r.consumerOffset, true],
        ["Lag", (r) => r.diff, true],
        ["In flight", (r) => r.popInFlight || 0, true],
        ["Last consumed", (r) => time(r.lastTimestamp)],
      ],
      group.progress,
      { id: "progress" },
    ),
    el("h2", {}, "Connections"),
    group.connections.length
      ? table([["Client", (c) => c.clientId], ["Address", (c) => c.clientAddr], ["Language", (c) => c.language], ["Version", (c) => c.version, true]], group.connections)
      : el("p", { class: "muted" }, "No consumer of this group is online."),
    el("p", {}, link(`#/dlq?group=${encodeURIComponent(group.group)}`, "Dead letters of this group")),
    el("h2", {}, "Reset offsets by time"),
    el("p", { class: "muted" }, "Stop the group's consumers first: running ones keep the offsets they hold and commit them again."),
    form(
      [
        ["topic", "Topic", topicsOf(group).map((t) => [t, t]), "select"],
        ["time", "Consume again from (local time)", "", "datetime-local"],
      ],
      "Reset",
      (values) => {
        const timestamp = new Date(values.time).getTime();
        if (!values.time || Number.isNaN(timestamp)) { showError("Pick the time to consume again from."); return; }
        act(
          `Reset group "${group.group}" on "${values.topic}" to the first message stored at or after ${new Date(timestamp).toISOString()}?`,
          () => api("POST", `/api/groups/${encodeURIComponent(group.group)}/reset`, { topic: values.topic, timestamp }),
          () => route(),
        );
      },
      "reset-offsets",
    ),
    el("h2", {}, "Delete"),
    el(
      "button",
      {
        type: "button",
        class: "danger",
        id: "delete-group",
        onclick: () => act(
          `Delete the subscription group "${group.group}" on every master? Its consumers are refused until it is created again (automatically, when autoCreateSubscriptionGroup is on).`,
          () => api("DELETE", `/api/groups/${encodeURIComponent(group.group)}`),
          () => { location.hash = "#/groups"; },
        ),
      },
      "Delete group",
    ),
  );
}

function topicsOf(group) {
  return [...new Set(group.progress.map((row) => row.topic).filter((t) => !t.startsWith("%RETRY%")))];
}

function messageTable(messages, withResend) {
  return table(
    [
      ["Message id", (m) => m.msgId],
      ["Topic", (m) => m.topic],
      ["Tags", (m) => m.tags],
      ["Keys", (m) => m.keys],
      ["Stored", (m) => time(m.storeTimestamp)],
      ["Retries", (m) => m.reconsumeTimes, true],
      ["", (m) => el("button", { type: "button", class: "view", onclick: () => showMessage(m) }, "View")],
      ...(withResend ? [["", (m) => el("button", { type: "button", class: "resend", onclick: () => withResend(m) }, "Resend")]] : []),
    ],
    messages,
    { id: "messages" },
  );
}

function showMessage(message) {
  const box = document.getElementById("message-detail");
  if (!box) return;
  fill(
    box,
    el("h2", {}, `Message ${message.msgId}`),
    table([["Property", (p) => p[0]], ["Value", (p) => p[1]]], [
      ["offsetMsgId", message.offsetMsgId], ["queue", `${message.queueId} @ ${message.queueOffset}`],
      ["born", `${time(message.bornTimestamp)} from ${message.bornHost}`], ["stored", `${time(message.storeTimestamp)} on ${message.storeHost}`],
      ["size", `${message.bodySize} B body, ${message.size} B stored`],
      ...Object.entries(message.properties),
    ]),
    el("h2", {}, `Body (${message.bodyEncoding}${message.bodyCut ? ", first 4 KiB" : ""})`),
    message.bodyProblem ? el("p", { class: "muted" }, message.bodyProblem) : null,
    el("pre", { class: "body", id: "message-body" }, message.body),
    el("button", { type: "button", id: "trace", onclick: () => showTrace(message) }, "Trace retries"),
    el("button", { type: "button", id: "msg-trace", onclick: () => showTimeline(message) }, "Message trace"),
    el("div", { id: "trace-steps" }),
    el("div", { id: "trace-timeline-box" }),
  );
}

// The message trace traced clients wrote: sent, stored, each group's consumption, as a timeline
// whose offsets count from the send.
async function showTimeline(message) {
  const box = document.getElementById("trace-timeline-box");
  try {
    const traced = await api("GET", `/api/messages?msgTrace=1&msgId=${encodeURIComponent(message.properties.UNIQ_KEY || message.msgId)}`);
    if (!traced.length) {
      box.replaceChildren(el("p", { id: "no-trace", class: "muted" }, "No trace: neither its producer nor a consumer had message trace on."));
      return;
    }
    const stored = { step: "stored", timestamp: message.storeTimestamp, clientHost: message.storeHost, status: "success", costMs: null, group: "" };
    const steps = [...traced, stored].sort((a, b) => a.timestamp - b.timestamp || (a.step === "sent" ? -1 : 0));
    const start = steps[0].timestamp;
    box.replaceChildren(
      el("h2", {}, "Message trace"),
      el("ol", { id: "trace-timeline", class: "timeline" }, ...steps.map((s) => el(
        "li",
        { class: `step ${s.status === "success" ? "ok" : "failed"}` },
        el("span", { class: "at" }, `${time(s.timestamp)} (+${s.timestamp - start} ms)`),
        el("strong", {}, s.step + (s.group ? ` by ${s.group}` : "")),
        el("span", { class: "detail" }, [
          s.clientHost ? `on ${s.clientHost}` : "",
          s.costMs !== null ? `took ${s.costMs} ms` : "",
          s.retryTimes ? `attempt ${s.retryTimes + 1}` : "",
          s.status,
        ].filter(Boolean).join(", ")),
      ))),
    );
  } catch (error) {
    showError(error.message);
  }
}

// Where the producer's message went: sent, each retry a group sent back, a dead letter.
async function showTrace(message) {
  const topic = message.properties.RETRY_TOPIC || message.topic;
  const box = document.getElementById("trace-steps");
  try {
    const steps = await api("GET", `/api/messages?trace=1&msgId=${encodeURIComponent(message.msgId)}&topic=${encodeURIComponent(topic)}`);
    box.replaceChildren(table(
      [
        ["Step", (s) => s.step],
        ["Group", (s) => s.group],
        ["Topic", (s) => s.topic],
        ["Stored", (s) => time(s.storeTimestamp)],
        ["Retries", (s) => s.reconsumeTimes, true],
      ],
      steps,
      { id: "trace-table" },
    ));
  } catch (error) {
    showError(error.message);
  }
}

function localInput(ms) {
  if (!ms) return "";
  const date = new Date(Number(ms));
  return new Date(date.getTime() - date.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
}

async function messagesPage(main, params) {
  const topic = params.get("topic") || "";
  const key = params.get("key") || "";
  const msgId = params.get("msgId") || "";
  const begin = params.get("begin") || "";
  const end = params.get("end") || "";
  if (begin || end) {
    const range = await api("GET", `/api/messages?topic=${encodeURIComponent(topic)}&begin=${encodeURIComponent(begin)}&end=${encodeURIComponent(end)}`);
    fill(
      main,
      el("h1", {}, `Messages of ${topic}`),
      timeRangeForm(topic, begin, end),
      range.cut ? el("p", { class: "muted", id: "range-cut" }, `The first ${range.limit} messages of the range; narrow it to see the rest.`) : null,
      range.messages.length ? paged(range.messages, (page) => messageTable(page)) : el("p", { id: "no-messages" }, "No message was stored in that range."),
      el("div", { id: "message-detail" }),
    );
    return;
  }
  const asked = (topic && key) || msgId;
  const found = asked ? await api("GET", `/api/messages?topic=${encodeURIComponent(topic)}&key=${encodeURIComponent(key)}&msgId=${encodeURIComponent(msgId)}`) : [];
  fill(main, 
    el("h1", {}, "Messages"),
    form(
      [["topic", "Topic", topic], ["key", "Key", key], ["msgId", "or message id", msgId]],
      "Search",
      (values) => { location.hash = `#/messages?topic=${encodeURIComponent(values.topic)}&key=${encodeURIComponent(values.key)}&msgId=${encodeURIComponent(values.msgId)}`; },
      "message-search",
    ),
    asked ? (found.length ? messageTable(found) : el("p", { id: "no-messages" }, "No message matches.")) : el("p", { class: "muted" }, "Search by topic and key, or by message id (a producer's id needs its topic)."),
    el("h2", {}, "By time range"),
    timeRangeForm(topic, begin, end),
    el("div", { id: "message-detail" }),
  );
}

function timeRangeForm(topic, begin, end) {
  return form(
    [
      ["topic", "Topic", topic],
      ["begin", "Stored from (local time)", localInput(begin), "datetime-local"],
      ["end", "until", localInput(end), "datetime-local"],
    ],
    "Search",
    (values) => {
      const from = new Date(values.begin).getTime();
      const until = new Date(values.end).getTime();
      if (Number.isNaN(from) || Number.isNaN(until)) { showError("Pick both ends of the time range."); return; }
      location.hash = `#/messages?topic=${encodeURIComponent(values.topic)}&begin=${from}&end=${until}`;
    },
    "time-range",
  );
}

async function dlqPage(main, params) {
  const group = params.get("group") || "";
  const letters = group ? await api("GET", `/api/dlq/${encodeURIComponent(group)}`) : [];
  const resend = (message) => act(
    `Resend dead letter ${message.msgId} to group "${group}"? Its consumers get it once more.`,
    () => api("POST", `/api/dlq/${encodeURIComponent(group)}/resend`, { msgId: message.offsetMsgId }),
  );
  fill(main, 
    el("h1", {}, "Dead letters"),
    form([["group", "Consumer group", group]], "Show", (values) => { location.hash = `#/dlq?group=${encodeURIComponent(values.group)}`; }, "dlq-search"),
    group ? (letters.length ? paged(letters, (page) => messageTable(page, resend)) : el("p", { id: "no-messages" }, `Group "${group}" has no dead letters.`)) : el("p", { class: "muted" }, "Name a consumer group."),
    el("div", { id: "message-detail" }),
  );
}

async function schedulePage(main) {
  const rows = await api("GET", "/api/schedule");
  const columns = rows.length ? Object.keys(rows[0]).map((key) => [key.replace(/^#/, ""), (r) => r[key]]) : [];
  fill(main, 
    el("h1", {}, "Schedule progress"),
    rows.length ? table(columns, rows, { id: "schedule" }) : el("p", { class: "muted" }, "Nothing is scheduled."),
  );
}

const PAGES = {
  cluster: clusterPage,
  topics: topicsPage,
  topic: topicPage,
  groups: groupsPage,
  group: groupPage,
  messages: messagesPage,
  dlq: dlqPage,
  schedule: schedulePage,
};

async function route() {
  if (chartTimer) clearInterval(chartTimer);
  chartTimer = null;
  const hash = location.hash.replace(/^#\/?/, "") || "cluster";
  const [path, query] = hash.split("?");
  const [name, ...rest] = path.split("/");
  const params = new URLSearchParams(query || "");
  const page = PAGES[name] || clusterPage;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === name);
  const main = document.getElementById("page");
  fill(main, el("p", { class: "muted" }, "Loading..."));
  try {
    const argument = rest.length ? decodeURIComponent(rest.join("/")) : params;
    await page(main, argument);
    showError("");
  } catch (error) {
    if (error.needsKey) {
      signInPage(main, error.message);
      return;
    }
    fill(main);
    showError(error.message);
  }
}

// ACL is on and the console's keys (if any) may not do this: ask for an access key. The keys
// go to the console server, which signs every later request with them.
function signInPage(main, refusal) {
  showError("");
  fill(
    main,
    el("h1", {}, "Access key needed"),
    el("p", { id: "refusal" }, `The cluster refused the console: ${refusal}`),
    form(
      [["accessKey", "Access key", ""], ["secretKey", "Secret key", "", "password"]],
      "Sign in",
      async (values) => {
        try {
          const who = await api("POST", "/api/session", values);
          showWho(who);
          route();
        } catch (error) {
          showError(error.message);
        }
      },
      "sign-in",
    ),
  );
}

function showWho(who) {
  const box = document.getElementById("who");
  if (!who.accessKey) {
    box.replaceChildren();
    return;
  }
  box.replaceChildren(
    `signed in as ${who.accessKey} `,
    el("button", { type: "button", id: "sign-out", onclick: async () => { showWho(await api("DELETE", "/api/session")); route(); } }, "Sign out"),
  );
}

// An answer stays on screen through the navigation its action caused (a delete returns to the
// list); following a menu link starts afresh.
window.addEventListener("hashchange", route);
api("GET", "/api/session").then(showWho).catch(() => {});
for (const a of document.querySelectorAll("nav a")) a.addEventListener("click", () => showAnswer(""));
route();
