# Sourced by gpu_session.sh and gpu_demo_session.sh once they have set OUT and TOTAL_S: the output folder (made
# absolute), the call's clock, within (the seconds a step may take), and the repository root as working folder.
SECONDS=0
within() {  # seconds a step may take: at most $1, and never past TOTAL_S (at least 1)
  local left=$(( TOTAL_S - SECONDS - 5 ))
  [ "$left" -lt "$1" ] && echo $(( left > 1 ? left : 1 )) || echo "$1"
}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
