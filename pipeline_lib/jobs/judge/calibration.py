"""Blind human calibration of the primary judge (paper App. B "LLM-Judge Validation").

``export``: a stable, seeded sample of N judged outputs per task, balanced over methods and
shown in shuffled order with the method hidden: ``items.csv`` (what the rater sees),
``rate.html`` (one static page: rate every item on the rubric in a browser, ratings kept
in the browser's local storage, "Download ratings CSV"; no server) and, separately,
``key.csv`` (item -> method, seed, prompt), which the rater never needs.

Generations are hostile text: the page carries them as JSON data (``<``, ``>``, ``&``, U+2028/9 escaped, so no
text can end or comment out a script) and shows them with ``textContent`` only; CSV cells a spreadsheet would run
as formulas are neutralised (:func:`pipeline_lib.core.io.spreadsheet_cell`) and read back as written.

``import``: a completed ratings CSV + the key + the primary judge's item scores ->
human-judge Pearson and Spearman over the rated items; for a task also judged against its expert reference
(``--pairwise-scores``), the same ratings against those pairwise scores too (``pairwise``). Without a ratings file
the result says so (``status: no ratings``); no number is ever invented.

``--scores`` maps each primary-judge ``scores.jsonl`` to its run (:class:`pipeline_lib.plan.runs.RunId`, written by
the plan): a run's method and seed are read from there (the key's ``seed`` column keeps its ``seed<k>`` form).
"""

from __future__ import annotations

import csv
import hashlib
import html
import io
import json
import random
import re
import statistics
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scipy import stats

from pipeline_lib.core.cli import entry_parser
from pipeline_lib.core.io import from_spreadsheet_cell, write_csv_rows, write_json, write_text
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.core.rubrics import RUBRICS, Rubric
from pipeline_lib.jobs.judge.score import prompt_row
from pipeline_lib.plan.runs import RunId
from pipeline_lib.plan.targets import run_ids_argument

__all__ = ["RatingsError", "agreement", "blind_sample", "export_calibration", "page_data", "read_ratings",
           "render_page"]

DIMENSIONS = {
    "meetingbank": {"informativeness": "Informativeness: captures the main points at the right compression",
                    "factuality": "Factuality: every fact consistent with the transcript",
                    "fluency": "Fluency: clear, grammatical, readable",
                    "coherence": "Coherence: one logically ordered account of one agenda item",
                    "redundancy": "Conciseness: no repetition or filler, information-dense"},
    "poetry": {"A": "A. Formal design & lineation", "B": "B. Sonic craft & rhythm",
               "C": "C. Imagery & figurative language", "D": "D. Complexity & tension (close-reading depth)",
               "E": "E. Diction, syntax & voice", "F": "F. Affective arc & resolution",
               "G": "G. Context & coherence"},
}


class RatingsError(ValueError):
    """A ratings file that cannot be used, with the row and column at fault."""


def _key_of(run: RunId) -> tuple[str, str]:
    """A judged run as the key file names it: (method, ``seed<k>``)."""
    return run.name, f"seed{run.seed}"


def blind_sample(pool: dict[str, list[dict[str, Any]]], size: int, seed: int) -> list[dict[str, Any]]:
    """``size`` items drawn round-robin over methods (each method's items shuffled), then shuffled for display."""
    rng = random.Random(seed)
    queues = {}
    for method in sorted(pool):
        items = list(pool[method])
        rng.shuffle(items)
        queues[method] = items
    chosen: list[dict[str, Any]] = []
    while len(chosen) < size and any(queues.values()):
        for method in sorted(queues):
            if queues[method] and len(chosen) < size:
                chosen.append(queues[method].pop())
    rng.shuffle(chosen)
    return [{"item_id": f"item-{i + 1:03d}", **item} for i, item in enumerate(chosen)]


def _context(task_row: dict[str, Any], rubric: Rubric) -> str:
    extra = task_row.get("extra_info", {})
    if rubric.name == "meetingbank":
        return str(extra.get("transcript", ""))
    return str(extra.get("instruction", ""))


#: Characters escaped in the page's JSON: none of them can then close the data block, open a comment or a script
#: inside it, or end a line in a JavaScript parser.
_JSON_IN_HTML = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                               "\u2029": "\\u2029"})


def page_data(payload: Any) -> str:
    """``payload`` as JSON safe inside ``<script type="application/json">``: markup characters as ``\\u`` escapes."""
    return json.dumps(payload, ensure_ascii=True).translate(_JSON_IN_HTML)


def render_page(task: str, rubric: Rubric, items: list[dict[str, Any]]) -> str:
    """The rating page: plain HTML + JS, data embedded as JSON, works from file:// with no server."""
    low, high = rubric.scale
    dims = DIMENSIONS[rubric.name]
    shown = [{"id": i["item_id"], "context": i["context"], "response": i["response"]} for i in items]
    # the local-storage key names this sample, so ratings of another export (same ids, other items) never show
    sample = hashlib.sha256(json.dumps([task, shown], sort_keys=True).encode()).hexdigest()[:16]
    payload = page_data({"task": task, "sample": sample, "keys": list(rubric.keys), "labels": dims, "low": low,
                         "high": high, "items": shown})
    title = html.escape(f"Blind rating: {task} ({len(items)} outputs)")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 900px; margin: 2em auto; padding: 0 1em; }}
.item {{ border: 1px solid #ccc; border-radius: 6px; padding: 1em; margin: 1em 0; }}
.item.done {{ border-color: #2a7; }}
pre {{ white-space: pre-wrap; background: #f6f6f6; padding: .6em; }}
label {{ display: inline-block; min-width: 28em; }}
#status {{ position: sticky; top: 0; background: #fff; padding: .5em 0; font-weight: bold; }}
</style></head>
<body>
<h1>{title}</h1>
<p>Score each output on every dimension from {low} (fails badly) to {high} (excellent), judging only against
the input shown. The generating method is hidden. Your ratings are kept in this browser as you go; when you are
done, press <b>Download ratings CSV</b> and send the file back.</p>
<div id="status"></div>
<div id="items"></div>
<button id="download">Download ratings CSV</button>
<script id="data" type="application/json">{payload}</script>
<script>
const DATA = JSON.parse(document.getElementById("data").textContent);
const STORE = "ratings:" + DATA.task + ":" + DATA.sample;
const saved = JSON.parse(localStorage.getItem(STORE) || "{{}}");
const root = document.getElementById("items");
function complete(id) {{ return DATA.keys.every(k => saved[id] && saved[id][k]); }}
function refresh() {{
  let done = 0;
  for (const item of DATA.items) {{
    const ok = complete(item.id);
    document.getElementById(item.id).classList.toggle("done", ok);
    done += ok;
  }}
  document.getElementById("status").textContent = done + " / " + DATA.items.length + " outputs rated";
}}
for (const item of DATA.items) {{
  const box = document.createElement("div");
  box.className = "item"; box.id = item.id;
  const h = document.createElement("h3"); h.textContent = item.id; box.appendChild(h);
  if (item.context) {{
    const c = document.createElement("pre"); c.textContent = item.context; box.appendChild(c);
  }}
  const r = document.createElement("pre"); r.className = "response"; r.textContent = item.response || "(empty)";
  box.appendChild(r);
  for (const key of DATA.keys) {{
    const row = document.createElement("div");
    const label = document.createElement("label"); label.textContent = DATA.labels[key] || key;
    const select = document.createElement("select");
    select.name = item.id + ":" + key; select.dataset.item = item.id; select.dataset.key = key;
    select.appendChild(new Option("-", ""));
    for (let v = DATA.low; v <= DATA.high; v++) select.appendChild(new Option(String(v), String(v)));
    select.value = (saved[item.id] && saved[item.id][key]) || "";
    select.addEventListener("change", () => {{
      saved[item.id] = saved[item.id] || {{}};
      saved[item.id][key] = select.value;
      localStorage.setItem(STORE, JSON.stringify(saved));
      refresh();
    }});
    row.appendChild(label); row.appendChild(select); box.appendChild(row);
  }}
  root.appendChild(box);
}}
document.getElementById("download").addEventListener("click", () => {{
  const lines = [["item_id", ...DATA.keys].join(",")];
  for (const item of DATA.items)
    if (complete(item.id)) lines.push([item.id, ...DATA.keys.map(k => saved[item.id][k])].join(","));
  const blob = new Blob([lines.join("\\n") + "\\n"], {{type: "text/csv"}});
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob); a.download = "ratings_" + DATA.task + ".csv";
  document.body.appendChild(a); a.click(); a.remove();
}});
refresh();
</script>
</body></html>
"""


def export_calibration(task: str, rubric: Rubric, score_files: Mapping[str, RunId], data: Path, size: int, seed: int,
                       out_dir: Path) -> list[Path]:
    """The blind sample of ``score_files`` (each primary-judge ``scores.jsonl`` -> its run) and its rating page."""
    import pandas as pd

    frame = pd.read_parquet(data)
    pool: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path, run in sorted(score_files.items()):
        method, run_seed = _key_of(run)
        with open(path, encoding="utf-8") as handle:
            for line_no, line in enumerate(handle, 1):
                record = json.loads(line)
                index = prompt_row(record.get("prompt_index"), len(frame), f"{path}:{line_no}", data)
                row = {"extra_info": frame["extra_info"].iloc[index]}
                pool[method].append({"method": method, "seed": run_seed, "prompt_index": record["prompt_index"],
                                     "response": record["response"], "context": _context(row, rubric)})
    available = sum(len(v) for v in pool.values())
    if available < size:
        raise ValueError(f"calibration for {task}: {size} items asked, only {available} judged outputs exist")
    items = blind_sample(pool, size, seed)
    write_csv_rows(out_dir / "items.csv", [["item_id", "context", "response"],
                                           *([i["item_id"], i["context"], i["response"]] for i in items)])
    write_csv_rows(out_dir / "key" / "key.csv", [["item_id", "method", "seed", "prompt_index"],
                                                 *([i["item_id"], i["method"], i["seed"], i["prompt_index"]]
                                                   for i in items)])
    write_text(out_dir / "rate.html", render_page(task, rubric, items))
    return [out_dir / "items.csv", out_dir / "rate.html", out_dir / "key" / "key.csv"]


_INTEGER = re.compile(r"[+-]?[0-9]+")  # ASCII digits only: int() also takes "1_0" (10) and other scripts' digits


def read_ratings(path: Path, rubric: Rubric, item_ids: set[str]) -> dict[str, float]:
    """Item id -> the rater's 0-100 score (mean dimension x 10), checking every cell. Read as a spreadsheet saves
    it: a byte-order mark (Excel's "CSV UTF-8") and CRLF rows are accepted, spaces around a header or a cell are
    not part of it; a cell is a plain integer (``1_0``, ``1e1``, ``١٠`` are refused, never read as 10)."""
    low, high = rubric.scale
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise RatingsError(f"{path}:{line}: not UTF-8 text (byte {exc.start}: {exc.reason}); save the sheet as "
                           "\"CSV UTF-8\"") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    fields = [(name or "").strip() for name in (reader.fieldnames or [])]
    reader.fieldnames = fields
    missing = [k for k in ("item_id", *rubric.keys) if k not in fields]
    if missing:
        raise RatingsError(f"{path}:1: missing column(s) {missing}; expected item_id,{','.join(rubric.keys)} "
                           f"(found {fields})")
    ratings: dict[str, float] = {}
    for raw in reader:
        line_no = reader.line_num
        row = {name: from_spreadsheet_cell(cell.strip() if isinstance(cell, str) else cell)
               for name, cell in raw.items()}
        item = row["item_id"]
        if item not in item_ids:
            raise RatingsError(f"{path}:{line_no}: unknown item_id {item!r} (not in this task's key)")
        if item in ratings:
            raise RatingsError(f"{path}:{line_no}: item_id {item!r} rated twice")
        values = {}
        for key in rubric.keys:
            cell = row[key]
            if not isinstance(cell, str) or not _INTEGER.fullmatch(cell):
                raise RatingsError(f"{path}:{line_no}: {key}={cell!r} is not an integer") from None
            values[key] = int(cell)
            if not low <= values[key] <= high:
                raise RatingsError(f"{path}:{line_no}: {key}={values[key]} outside {low}-{high}")
        ratings[item] = rubric.normalise(values)
    return ratings


def agreement(ratings_path: Path | None, key_path: Path, score_files: Mapping[str, RunId], rubric: Rubric
              ) -> dict[str, Any]:
    """Human-judge correlation over the rated items (``score_files``: each ``scores.jsonl`` -> its run)."""
    with open(key_path, encoding="utf-8", newline="") as handle:
        key = {row["item_id"]: row for row in ({name: from_spreadsheet_cell(cell) for name, cell in raw.items()}
                                               for raw in csv.DictReader(handle))}
    if ratings_path is None or not ratings_path.exists():
        return {"status": "no ratings", "items_in_sample": len(key),
                "expected_file": str(ratings_path) if ratings_path else None,
                "note": "no human ratings file; rate the items with rate.html and set judge.calibration.ratings"}
    ratings = read_ratings(ratings_path, rubric, set(key))
    judge_scores: dict[tuple[str, str, int], float] = {}
    for path, run in score_files.items():
        method, seed = _key_of(run)
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                record = json.loads(line)
                if "score_100" in record:
                    judge_scores[(method, seed, record["prompt_index"])] = record["score_100"]
    pairs = []
    for item, human in sorted(ratings.items()):
        row = key[item]
        judged = judge_scores.get((row["method"], row["seed"], int(row["prompt_index"])))
        if judged is not None:
            pairs.append((human, judged))
    result: dict[str, Any] = {"status": "rated", "items_in_sample": len(key), "items_rated": len(ratings),
                              "items_compared": len(pairs)}
    if len(pairs) < 3 or len({h for h, _ in pairs}) < 2 or len({j for _, j in pairs}) < 2:
        return result | {"pearson": None, "spearman": None,
                         "note": "undefined: fewer than 3 compared items or a constant side"}
    human, judged = zip(*pairs, strict=True)
    return result | {"pearson": float(stats.pearsonr(human, judged).statistic),
                     "spearman": float(stats.spearmanr(human, judged).statistic),
                     "human_mean": statistics.fmean(human), "judge_mean": statistics.fmean(judged)}


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, summary="line", logs=False)
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", help="blind sample + rating page + separate key")
    export.add_argument("--task", required=True)
    export.add_argument("--rubric", required=True, choices=sorted(RUBRICS))
    export.add_argument("--scores", type=run_ids_argument, required=True,
                        help="JSON (or its file): each primary judge scores.jsonl -> its run")
    export.add_argument("--data", type=Path, required=True)
    export.add_argument("--size", type=int, required=True)
    export.add_argument("--seed", type=int, required=True)
    export.add_argument("--out", type=Path, required=True)
    imp = sub.add_parser("import", help="human-judge correlation from a completed ratings CSV")
    imp.add_argument("--rubric", required=True, choices=sorted(RUBRICS))
    imp.add_argument("--ratings", default="", help="completed ratings CSV; empty or absent file = no ratings yet")
    imp.add_argument("--key", type=Path, required=True)
    imp.add_argument("--scores", type=run_ids_argument, required=True,
                     help="JSON (or its file): each primary judge scores.jsonl -> its run")
    imp.add_argument("--pairwise-scores", type=run_ids_argument, default={},
                     help="JSON (or its file): each primary judge pairwise scores.jsonl (against the expert "
                          "reference) -> its run; the same ratings are compared with them under 'pairwise'")
    imp.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    rubric = RUBRICS[args.rubric]
    if args.command == "export":
        outputs = export_calibration(args.task, rubric, args.scores, args.data, args.size, args.seed, args.out)
        write_provenance(outputs, step="judge_calibration_export", inputs=[*map(Path, args.scores), args.data],
                         params={"task": args.task, "size": args.size}, seeds={"sample": args.seed})
        print(f"{args.task}: {args.size} blind items -> {args.out / 'rate.html'}")
    else:
        ratings = Path(args.ratings) if args.ratings else None
        result = agreement(ratings, args.key, args.scores, rubric)
        if args.pairwise_scores:  # the same blind ratings against the judge's win rate over the expert reference
            result["pairwise"] = agreement(ratings, args.key, args.pairwise_scores, rubric) | {
                "compared_with": "the primary judge's pairwise score against the expert reference (per item: 100 x "
                                 "its mean outcome over both orders); the human rates each output in isolation"}
        write_json(args.out, result)
        inputs = [args.key, *map(Path, args.scores), *map(Path, args.pairwise_scores)] + \
            ([ratings] if ratings and ratings.exists() else [])
        write_provenance([args.out], step="judge_calibration_import", inputs=inputs)
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
