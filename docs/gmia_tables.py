"""GMIA Tables 2-4 on our data, as Markdown rows, from the report of one ``medanon evaluate`` run.

Table 2 (utility and membership) from each release's ``utility`` and ``attacks.membership``; Tables 3-4
(linkability and singling out) from ``attacks.linkability`` / ``attacks.singling_out`` (the main identity
network), ``attacks.independent`` and ``attacks.siamese``. Every number is read from the report, none computed here;
its Ns and intervals are the report's (outer pairs, people, test images, membership slots).

    python docs/gmia_tables.py --report reports/xray/report.json \\
        --label gmia="X_A L_ut + L_id (GMIA)" --label recon="X̂_R co-training (--steps 0)"
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ATTACKERS = (("main", "main (64 px)"), ("independent", "independent (ResNet-10, 24 px)"),
             ("siamese", "Siamese (pairs)"))


def f3(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def ci(v: list[float] | None) -> str:
    return "" if not v else f" [{v[0]:.3f}, {v[1]:.3f}]"


def attacker_rows(attacks: dict) -> dict[str, tuple[dict, dict | None]]:
    """attacker -> (outer linkability, singling out or None) as the report holds them."""
    rows = {}
    if "outer" in attacks.get("linkability", {}):           # a release without its mapping has no linkability
        rows["main"] = (attacks["linkability"]["outer"], attacks.get("singling_out"))
    if "outer" in attacks.get("independent", {}).get("linkability", {}):
        ind = attacks["independent"]
        rows["independent"] = (ind["linkability"]["outer"], ind.get("singling_out"))
    if "outer" in attacks.get("siamese", {}):
        rows["siamese"] = (attacks["siamese"]["outer"], None)
    return rows


def table_linkability(releases: list[dict], label: dict[str, str]) -> list[str]:
    out = ["| release | attacker | outer TAR [95 % CI] | outer AUC [CI] | two-sided AUC | reverse TAR | "
           "hidden rate (per person) | reverse top-1 |", "|---|---|---|---|---|---|---|---|"]
    for rel in releases:
        rows = attacker_rows(rel["attacks"])
        for key, name in ATTACKERS:
            if key not in rows:
                continue
            lk, so = rows[key]
            hidden = f3(so["hidden_rate_individual"]) if so else "–"
            rtop = f3(so["reverse_top1"]) if so else "–"
            out.append(f"| {label.get(rel['name'], rel['name'])} | {name} | {f3(lk['TAR'])}{ci(lk['TAR_ci'])} | "
                       f"{f3(lk['AUC'])}{ci(lk['AUC_ci'])} | {f3(lk['AUC_two_sided'])} | {f3(lk['reverse_TAR'])} | "
                       f"{hidden} | {rtop} |")
    return out


def table_utility(releases: list[dict], label: dict[str, str]) -> list[str]:
    out = []
    for rel in releases:
        for task, u in rel.get("utility", {}).items():
            metric = "kappa" if "kappa" in u["paired_bootstrap"] else "auroc"
            if not out:
                out += [f"| training data | {task} {metric} (mean ± sd, {len(u['seeds'])} seeds) | paired bootstrap "
                        f"95 % CI | real same-N [CI] | difference [CI] | membership top-1 [CI] (chance) |",
                        "|---|---|---|---|---|---|"]
            pb, rs = u["paired_bootstrap"][metric], u["release"][metric]
            real = pb["real_same_n"]
            mem = rel["attacks"].get("membership", {})
            member = (f"{f3(mem['top_k_accuracy'])}{ci(mem['ci'])} ({mem['chance']:.3f})" if "top_k_accuracy" in mem
                      else "–")
            out.append(f"| {label.get(rel['name'], rel['name'])} | {rs['mean']:.3f} ± {rs['sd']:.3f} | "
                       f"{ci(pb['release']['ci']).strip()} | {f3(real['value'])}{ci(real['ci'])} | "
                       f"{pb['difference']['value']:+.3f}{ci(pb['difference']['ci'])} | {member} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", type=Path, required=True, help="report.json of medanon evaluate")
    ap.add_argument("--label", action="append", default=[], help="NAME=TEXT: the row label of release NAME")
    args = ap.parse_args()
    report = json.loads(args.report.read_text())
    label = dict(s.split("=", 1) for s in args.label)
    releases = report["releases"]
    u = next(iter(releases[0].get("utility", {}).values()), None)
    if u is not None:
        print(f"Table 2 (learner: {u.get('learner', '?')}; n_train {u['n_train']}, n_test {u['n_test']})\n")
        print("\n".join(table_utility(releases, label)) + "\n")
    print("Tables 3-4\n")
    print("\n".join(table_linkability(releases, label)))


if __name__ == "__main__":
    main()
