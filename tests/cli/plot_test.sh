#!/usr/bin/env bash
# trident plot draws runs' metrics.jsonl into a picture: the default RUN_DIR/loss.png is a PNG of the
# figure's size; an SVG parses as XML and holds each run's training curve as a line through exactly its
# points (a repeated step once, a NaN loss left out with a warning naming it), in the run's colour.
#   plot_test.sh TRIDENT_BINARY
set -uo pipefail
trident=$1
source "$(dirname "$0")/tiny_corpus.sh"
work_dir plot
command -v python3 > /dev/null || { echo "skip: python3 (its standard library checks the pictures) is missing"; exit 77; }

# Run a: 6 training steps (step 30 written twice, as after a resume; step 40's loss NaN, written as
# null), evaluations at 0 and 50. Run b: 3 steps, no evaluation. No three points in a line (Cairo's
# SVG merges the segments of a straight run).
mkdir -p "$work/a" "$work/b"
cat > "$work/a/metrics.jsonl" <<'EOF'
{"step":0,"val_loss":81.0,"val_ppl":1.5e35}
{"step":10,"loss":80.5,"lr":0.001}
{"step":20,"loss":70.5,"lr":0.003}
{"step":30,"loss":60.5,"lr":0.004}
{"step":30,"loss":55.25,"lr":0.004}
{"step":40,"loss":null,"lr":0.0045}
{"step":50,"loss":40.0,"lr":0.005}
{"step":60,"loss":37.0,"lr":0.0048}
{"step":50,"val_loss":42.0}
EOF
printf '{"step":10,"loss":70,"lr":0.001}\n{"step":20,"loss":60,"lr":0.002}\n{"step":30,"loss":55,"lr":0.0025}\n' \
  > "$work/b/metrics.jsonl"

cd "$work"
out=$("$trident" plot a 2> err.txt) || fail "trident plot a: $out $(cat err.txt)"
[[ $out == *"plot: a/loss.png"* ]] || fail "the default picture is not a/loss.png: $out"
[[ $out == *"a/metrics.jsonl: 5 training losses (steps 10-60, last 37), 2 validation losses (steps 0-50, last 42)"* ]] \
  || fail "the summary line: $out"
grep -q "warning: a/metrics.jsonl: left out 1 value(s) that cannot be drawn: loss at step 40" err.txt \
  || fail "no warning about the NaN loss: $(cat err.txt)"

"$trident" plot a b --output pics/ab.svg --log-y > out.txt 2>&1 || fail "trident plot a b: $(cat out.txt)"
grep -q "^plot: pics/ab.svg$" out.txt || fail "the SVG's path is not printed: $(cat out.txt)"

python3 - a/loss.png pics/ab.svg <<'EOF' || fail "the pictures (above)"
import re, struct, sys, xml.etree.ElementTree as ET
png = open(sys.argv[1], "rb").read()
assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
length, kind, width, height = struct.unpack(">I4sII", png[8:24])
assert kind == b"IHDR" and (width, height) == (1000, 760), (kind, width, height)
assert png[-8:-4] == b"IEND", "the PNG does not end with IEND"

root = ET.parse(sys.argv[2]).getroot()
assert root.tag.endswith("svg"), root.tag
paths = [(p.get("style", ""), p.get("d", "")) for p in root.iter("{http://www.w3.org/2000/svg}path")]
def curves(colour):  # the lines stroked in a colour, as their numbers of points
    return sorted(len(re.findall(r"[ML] ", d)) for style, d in paths
                  if "stroke-width:1.8" in style and "stroke:rgb(" + colour + ")" in style)
blue, orange = "12.2%,46.7%,70.6%", "100%,49.8%,5.5%"
# Run a (blue): training 5 points, validation 2, lr 6; run b (orange): training 3, lr 3; and one legend
# sample line (2 points) per labelled series.
assert 5 in curves(blue) and 2 in curves(blue) and 6 in curves(blue), curves(blue)
assert 3 in curves(orange), curves(orange)
assert curves(blue).count(2) >= 3 and curves(orange).count(2) >= 1, (curves(blue), curves(orange))
print("pictures ok: PNG %dx%d, SVG with %d paths" % (width, height, len(paths)))
EOF
echo "ok: trident plot wrote a/loss.png and pics/ab.svg"
