"""VS-Snow (MICCAI 2024 submission) Tables 1–2: a sex attacker and a DR classifier on Snow / VS-Snow releases.

    nice -n 19 python benchmarks/reproduce/vs_snow.py --scale small --out /work/repro-runs/vs_snow-small
    nice -n 19 python benchmarks/reproduce/vs_snow.py --scale paper --out /work/repro-runs/vs_snow-paper

Releases (the demo's): Snow and VS-Snow (the shipped U-Net ``unet-vessels64.pt``) at p = 0.1, 0.3, 0.5, secret
seeds. Evaluation: the demo's protocol (:func:`medanon.demo.eval_config`): the sex attacker is the shipped
``attacker-sex-fundus64.pt`` (trained on patients of another phantom seed), applied to each released image
(attacks.attribute: accuracy on the release, on the same records' originals, and on held-out real images, with
its calibration verdict); DR utility is the 3-class F1 of a probe trained on the release and tested on held-out
real images, paired with the same probe trained on the real images (same N). The paper's numbers are BRSET's
(Table 1 and Table 2, BRSET rows; the Diabetes Center rows are a private dataset), transcribed from
/work/shared/papers/vs-snow.txt. Prints ONE JSON line; writes OUT/table.md and OUT/result.json; resumes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as C

PS = (0.1, 0.3, 0.5)
# BRSET rows: (original, p=.1, p=.3, p=.5). Table 1's DR row as extracted has 4 numbers that disagree with the
# text's 82.6 baseline (docs/snow.md says so); the text's "F1 64.5 at p=0.5, baseline 82.6" is used for Snow.
PAPER = {"snow": {"sex": (75.12, 64.99, 61.35, 52.15), "dr_f1": (82.6, 72.3, 69.6, 64.5)},
         "vs-snow": {"sex": (75.12, 67.7, 60.1, 58.1), "dr_f1": (82.6, 78.1, 75.0, 72.0)}}
NAMES = {"snow": "Snow", "vs-snow": "VS-Snow"}
TASK, METRIC = "grade", "f1_3class"

SCALES = {
    "paper": C.Scale("paper", patients=8108, per_patient=2,
                     note="16,216 fundus images of 8,108 patients x 2, as BRSET (16,266 images, 8,108 patients)"),
    "small": C.Scale("small", patients=120, per_patient=2, note="240 fundus images (120 patients x 2): a quick run"),
}


def make_releases(train: Path, rel_dir: Path, ckpt: Path, *, seed: int, device, log: list[str]) -> list[Path]:
    import medanon.anonymize as anonymize
    from medanon.config import DataConfig
    from medanon.data.dataset import open_dataset

    ds = open_dataset(train, DataConfig(size=64))
    unet = ckpt / "unet-vessels64.pt"
    out = []
    for method in ("snow", "vs-snow"):
        for p in PS:
            cmd = f"anonymize {method} --data {train} --p {p}" + (f" --checkpoint {unet}" if method != "snow" else "")
            if method == "snow":
                make = lambda p=p: anonymize.snow(ds, p=p, device=device)                       # noqa: E731
            else:
                make = lambda p=p: anonymize.vs_snow(ds, p=p, checkpoint=unet, device=device)   # noqa: E731
            out.append(C.make_release(rel_dir / f"{method}-p{p}", make, log, cmd))
    return out


def _sex(rel: dict | None, key: str = "accuracy") -> C.Cell:
    a = ((rel or {}).get("attacks") or {}).get("attribute") or {}
    if key not in a:
        return C.Cell(None, note="not run")
    n = a.get("n_heldout") if key.startswith("heldout") else a.get("n")
    ok, _ = C.attack_valid(rel, "attribute")
    return C.Cell(a[key], *(a.get(f"{key}_ci") or [None, None])[:2], n=n, note="" if ok else "INVALID attack")


def assemble(report: dict, *, scale: str, note: str, command: str, timing: dict) -> tuple[str, dict]:
    R = lambda n: C.release(report, n)                               # noqa: E731
    tables, claims = {}, []
    for m in ("snow", "vs-snow"):
        rels = [R(f"{m}-p{p}") for p in PS]
        orig_sex = _sex(rels[0], "original_accuracy")
        held = _sex(rels[0], "heldout_real_accuracy")
        base_f1 = C.utility_cell(rels[0], TASK, METRIC, "real_same_n")
        rows = [["Sex (acc., %)", f"{PAPER[m]['sex'][0]}", f"{held.fmt(1, 100)}; on these records' originals "
                 f"{orig_sex.fmt(1, 100)}"] + [c for i, r in enumerate(rels) for c in (f"{PAPER[m]['sex'][i + 1]}",
                                                                                       _sex(r).fmt(1, 100))],
                ["DR (3-class F1, %)", f"{PAPER[m]['dr_f1'][0]}", base_f1.fmt(1, 100)]
                + [c for i, r in enumerate(rels) for c in (f"{PAPER[m]['dr_f1'][i + 1]}",
                                                           C.utility_cell(r, TASK, METRIC).fmt(1, 100))]]
        head = ["", "paper original", "ours original"] + [h for p in PS for h in (f"p={p} paper", f"p={p} ours")]
        tables[f"table{1 if m == 'snow' else 2}_{m}"] = C.md_table(head, rows)
        chance = ((rels[0] or {}).get("attacks") or {}).get("attribute", {}).get("heldout_chance")
        lo_ok = held.lo is not None and chance is not None and held.lo > chance
        claims.append(C.Claim(f"T{1 if m == 'snow' else 2} original: the sex attacker beats chance on real images",
                              f"{PAPER[m]['sex'][0]} %", f"{held.fmt(1, 100)} (majority {100 * (chance or 0):.1f})",
                              C.HOLDS if lo_ok else C.UNSURE,
                              "" if lo_ok else "the interval reaches the majority class: the attacker is not "
                              "informative here, so no release can show a fall"))
        s1, s5 = _sex(rels[0]), _sex(rels[2])
        valid = all(C.attack_valid(r, "attribute")[0] for r in rels if r)
        v = C.less(s5, s1) if valid else C.UNSURE
        claims.append(C.Claim(f"T{1 if m == 'snow' else 2} {NAMES[m]}: sex accuracy falls from p=0.1 to p=0.5",
                              f"{PAPER[m]['sex'][3]} < {PAPER[m]['sex'][1]}", f"{s5.fmt(1, 100)} vs {s1.fmt(1, 100)}",
                              v, "" if v == C.HOLDS else "the attack failed its calibration: "
                              + C.attack_valid(rels[2], "attribute")[1].split("; ")[0] if not valid
                              else "intervals overlap" if v == C.UNSURE else "it rises"))
        f1, f5 = C.utility_cell(rels[0], TASK, METRIC), C.utility_cell(rels[2], TASK, METRIC)
        v = C.less(f5, f1)
        claims.append(C.Claim(f"T{1 if m == 'snow' else 2} {NAMES[m]}: DR F1 falls from p=0.1 to p=0.5",
                              f"{PAPER[m]['dr_f1'][3]} < {PAPER[m]['dr_f1'][1]}",
                              f"{f5.fmt(1, 100)} vs {f1.fmt(1, 100)}", v,
                              {C.HOLDS: "", C.UNSURE: "unpaired intervals overlap", C.FAILS: "it rises"}[v]))
        d = C.utility_cell(rels[2], TASK, METRIC, "difference")
        v = C.below_zero(d)
        claims.append(C.Claim(f"T{1 if m == 'snow' else 2} {NAMES[m]} p=0.5: DR F1 below the originals'",
                              f"{PAPER[m]['dr_f1'][3]} < {PAPER[m]['dr_f1'][0]}",
                              f"release − real (paired) {d.fmt(1, 100)}", v,
                              {C.HOLDS: "", C.UNSURE: "the paired interval contains 0", C.FAILS: "above"}[v]))
    a, b = C.utility_cell(R("snow-p0.5"), TASK, METRIC), C.utility_cell(R("vs-snow-p0.5"), TASK, METRIC)
    v = C.less(a, b)
    claims.append(C.Claim("§4.2 p=0.5: VS-Snow keeps more DR F1 than Snow", "72.0 > 64.5",
                          f"{b.fmt(1, 100)} vs {a.fmt(1, 100)}", v,
                          {C.HOLDS: "", C.UNSURE: "unpaired intervals overlap", C.FAILS: "Snow keeps more"}[v]))
    return C.page(paper="vs-snow", title="VS-Snow", scale=scale, note=note, command=command, timing=timing,
                  intro=["PHANTOM data: value [95 % interval] N. Paper: BRSET."],
                  sections=[("Table 1: Snow", tables["table1_snow"]), ("Table 2: VS-Snow", tables["table2_vs-snow"])],
                  claims=claims, tables=tables)


def main(argv: list[str] | None = None) -> dict:
    args = C.parser(__doc__, SCALES).parse_args(argv)
    return C.run_paper(args, paper="vs_snow", scale=SCALES[args.scale], modality="fundus", stratify="grade",
                       make_releases=make_releases, assemble=assemble, script="vs_snow.py")


if __name__ == "__main__":
    main()
