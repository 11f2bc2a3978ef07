from harness import *
F = ROOT/"f64"; X = ROOT/"x64"; A = medanon.anonymize
C = Path("/work/main/checkpoints")
ds = medanon.open_dataset(F, size=64); dsX = medanon.open_dataset(X, size=64)
R = lambda r: f"len={len(r)} model_files={ {k: (v.get('file') if isinstance(v, dict) else v) for k, v in r.params.get('model_files', {}).items()} }"
from medanon.codecs.stylegan import load_codec
codec = load_codec(C/"restyle-map-fundus64.pt")
for label, c in [("name", "restyle-map-fundus64"), ("name.pt", "restyle-map-fundus64.pt"), ("path str", str(C/"restyle-map-fundus64.pt")), ("Path", C/"restyle-map-fundus64.pt"), ("loaded", codec)]:
    trial(f"kcentroid codec {label}", lambda: R(A.kcentroid(ds, k=2, codec=c)))
    trial(f"inverted codec {label}", lambda: R(A.inverted(ds, codec=c)))
    trial(f"ksalsa codec {label}", lambda: R(A.ksalsa(ds, k=2, codec=c, steps=1)))
trial("gmia model path + identity path + utility path", lambda: R(A.gmia(ds, model=C/"cotrained-map-fundus64.pt", identity=str(C/"identity-fundus64.pt"), utility=C/"classifier-grade-fundus64.pt", steps=1)))
from medanon.anonymize.gmia import IdentityEncoder, UtilityEncoder
idn = IdentityEncoder.from_checkpoint(C/"identity-fundus64.pt"); ut = UtilityEncoder.from_checkpoint(C/"classifier-grade-fundus64.pt")
gcodec = load_codec(C/"cotrained-map-fundus64.pt")
trial("gmia loaded model/identity/utility", lambda: R(A.gmia(ds, model=gcodec, identity=idn, utility=ut, steps=1)))
trial("gmia names", lambda: R(A.gmia(ds, model="cotrained-map-fundus64", identity="identity-fundus64.pt", utility="classifier-grade-fundus64", steps=1)))
trial("dpglow flow name", lambda: R(A.dpglow(dsX, epsilon=100.0, per_element=True, flow="glow-xray64")))
trial("dpglow flow path", lambda: R(A.dpglow(dsX, epsilon=100.0, per_element=True, flow=C/"glow-xray64.pt")))
try:
    from medanon.api.dp import load_flow_for
    fl = load_flow_for(C/"glow-xray64.pt")
    print("flow obj", type(fl))
    trial("dpglow flow loaded", lambda: R(A.dpglow(dsX, epsilon=100.0, per_element=True, flow=fl)))
except Exception as e: print("load_flow_for failed", e)
try:
    from medanon.models.glow import Glow
except Exception as e: print(e)
trial("vs_snow checkpoint name", lambda: R(A.vs_snow(ds, p=0.3, checkpoint="unet-vessels64")))
trial("vs_snow checkpoint path", lambda: R(A.vs_snow(ds, p=0.3, checkpoint=C/"unet-vessels64.pt")))
from medanon.segment.learned import LearnedSegmenter
import inspect; print([m for m in dir(LearnedSegmenter) if not m.startswith("_")])
seg = None
for meth in ("from_checkpoint", "load"):
    if hasattr(LearnedSegmenter, meth):
        seg = trial(f"LearnedSegmenter.{meth}", lambda: getattr(LearnedSegmenter, meth)(C/"unet-vessels64.pt"), show=False); break
if seg is not None:
    trial("vs_snow checkpoint loaded", lambda: R(A.vs_snow(ds, p=0.3, checkpoint=seg)))
