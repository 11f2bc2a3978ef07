"""Privacy attacks on a release, each reported with a control baseline and its assumptions.

- :mod:`.membership`  — k-SALSA §4.5: top-K membership of real images in released clusters;
- :mod:`.attribute`   — VS-Snow §2.4: a sex classifier trained on real images, tested on the release;
- :mod:`.linkability` — GMIA §3: identity verification, inner and outer risk, TAR at fixed FAR;
- :mod:`.singling_out` — GMIA §3: hidden rate and local cloaking on identity embeddings;
- :mod:`.siamese`     — Packhäuser et al. 2022: a Siamese network verifying "same patient?" on image pairs;
- :mod:`.risk`        — success rates with Wilson or patient cluster bootstrap intervals and residual risk over
  a control set (the estimator of anonymeter, Giomi et al. 2023), and the nearest-record inference attack;
- :mod:`.views`       — every released image scored as released and mirrored left-right, the higher kept;
- :mod:`.stats`       — exact tests, ranks that give a tie no credit (a tie with t others counts 1/(t+1)), and
  the patient cluster bootstrap.
"""
