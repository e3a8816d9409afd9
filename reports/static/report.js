/* amqp-conformance report: matrix filters, the client x rule filter and lazy frame logs; no libraries, works from file:// */
"use strict";

(function matrixFilters() {
  const table = document.getElementById("matrix");
  if (!table) return;
  const text = document.getElementById("filter-text");
  const area = document.getElementById("filter-area");
  const verdict = document.getElementById("filter-verdict");
  const differs = document.getElementById("filter-differs");
  const count = document.getElementById("matrix-count");
  const rows = Array.from(table.tBodies[0].rows);

  function apply() {
    const needle = text.value.trim().toLowerCase();
    let shown = 0;
    for (const row of rows) {
      const verdicts = row.dataset.verdicts.trim().split(/\s+/);
      const present = verdicts.filter((v) => v !== "none");
      const ok = (!needle || row.dataset.rule.toLowerCase().includes(needle) || row.dataset.title.includes(needle))
        && (!area.value || row.dataset.area === area.value)
        && (!verdict.value || verdicts.includes(verdict.value))
        && (!differs.checked || new Set(present).size > 1);
      row.classList.toggle("hidden", !ok);
      if (ok) shown += 1;
    }
    count.textContent = shown + " of " + rows.length + (rows.length === 1 ? " rule" : " rules");
  }

  for (const control of [text, area, verdict, differs]) {
    control.addEventListener("input", apply);
    control.addEventListener("change", apply);
  }
  const params = new URLSearchParams(window.location.search);
  if (params.has("verdict")) verdict.value = params.get("verdict");
  if (params.has("area")) area.value = params.get("area");
  if (params.has("q")) text.value = params.get("q");
  apply();
})();

(function throughClientsFilter() {
  const table = document.getElementById("through-matrix");
  if (!table) return;
  const library = document.getElementById("filter-library");
  const count = document.getElementById("through-count");
  const rows = Array.from(table.tBodies[0].rows);

  function apply() {
    let shown = 0;
    for (const row of rows) {
      const ok = !library.checked || row.dataset.library === "yes";
      row.classList.toggle("hidden", !ok);
      if (ok) shown += 1;
    }
    count.textContent = shown + " of " + rows.length + (rows.length === 1 ? " rule" : " rules");
  }

  library.addEventListener("change", apply);
  apply();
})();

(function frameLog() {
  const box = document.querySelector("[data-frame-log]");
  if (!box) return;
  const flagged = new Set((box.dataset.flagged || "").trim().split(/\s+/).filter(Boolean));

  window.amqpcFrameLog = function (log) {
    if (log.rows.length === 0) {
      box.replaceChildren(document.createTextNode("No frames were recorded for this test."));
      box.dataset.loaded = "true";
      return;
    }
    const table = document.createElement("table");
    table.id = "frame-log-table";
    const head = table.createTHead().insertRow();
    for (const name of ["seq", "ms", "conn", "ch", "", "frame", "fields"]) {
      const th = document.createElement("th");
      th.textContent = name;
      head.appendChild(th);
    }
    const body = table.createTBody();
    for (const [seq, ms, conn, ch, dir, frame, fields] of log.rows) {
      const row = body.insertRow();
      row.className = dir === "in" ? "in" : "out";
      if (flagged.has(conn + ":" + ch + ":" + seq)) row.classList.add("flagged");
      const values = [seq, ms.toFixed(3), conn, ch, dir === "in" ? "←" : "→", frame, fields];
      values.forEach((value, i) => {
        const cell = row.insertCell();
        cell.textContent = value === null || value === undefined ? "" : String(value);
        cell.className = ["seq", "ms", "conn", "ch", "dir", "frame", "fields"][i];
      });
    }
    box.replaceChildren(table);
    box.dataset.loaded = "true";
    const count = document.getElementById("frame-count");
    if (count) count.textContent = log.rows.length + (log.rows.length === 1 ? " frame" : " frames");
  };

  function load() {
    const script = document.createElement("script");
    script.src = box.dataset.frameLog;
    script.onerror = function () {
      box.replaceChildren(document.createTextNode("No frame log was recorded for this test."));
      box.dataset.loaded = "missing";
    };
    document.body.appendChild(script);
  }

  load();  // only this test's log: the page itself never carries it
})();

(function gridFilters() {
  const form = document.getElementById("grid-filters");
  if (!form) return;
  const target = document.getElementById("grid-filter-target");
  const client = document.getElementById("grid-filter-client");
  const changed = document.getElementById("grid-filter-changed");
  const areas = Array.from(document.querySelectorAll("details.grid-area"));

  function apply() {
    const wantTarget = target.value.trim().toLowerCase();
    const wantClient = client.value.trim().toLowerCase();
    for (const cell of document.querySelectorAll("[data-target]")) {
      cell.classList.toggle("hidden", Boolean(wantTarget) && !cell.dataset.target.includes(wantTarget));
    }
    for (const row of document.querySelectorAll("tr[data-client]")) {
      row.classList.toggle("hidden", Boolean(wantClient) && !row.dataset.client.includes(wantClient));
    }
    for (const area of areas) {
      area.classList.toggle("hidden", changed.checked && area.dataset.changed === "0");
    }
  }

  for (const control of [target, client, changed]) {
    control.addEventListener("input", apply);
    control.addEventListener("change", apply);
  }
  document.getElementById("grid-open").addEventListener("click", () => areas.forEach((a) => { a.open = true; }));
  document.getElementById("grid-close").addEventListener("click", () => areas.forEach((a) => { a.open = false; }));
  const params = new URLSearchParams(window.location.search);
  if (params.has("target")) target.value = params.get("target");
  if (params.has("client")) client.value = params.get("client");
  apply();
})();
