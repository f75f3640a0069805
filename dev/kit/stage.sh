#!/bin/bash
# Device side, an engine's kit (dev/build_kit.py). Run at the start of every call that carries one or more parts
# (.kit-ENGINE/cN/): copies them to /tmp/ENGINE-kit; once all NPARTS (bin/KIT.manifest) are there, joins them, checks
# the sha256 and unpacks the installed tree into /tmp/ENGINE-site (once per machine).
# Exit 0 = KIT READY, 3 = KIT PARTIAL (carry the next part in the next call, within 30 s), 4 = corrupt, 5 = unpack failed.
# Then, in the shell that starts the engine:  source .kit-ENGINE/bin/env.sh  (or give dev/device-site.yaml to snakemake)
# A part is staged only when its sha256 is the manifest's (PARTi): the device's checkout keeps the folders of earlier
# calls, so after a recut (build_kit.py --repart) a cN/ of the old cut is still there, with a part of the same name.
set -u; K=$(cd "$(dirname "$0")/.." && pwd); M="$K/bin/KIT.manifest"
E=$(awk '$1=="ENGINE"{print $2}' "$M"); N=$(awk '$1=="NPARTS"{print $2}' "$M")
SUM=$(awk '$1=="SHA256"{print $2}' "$M"); D=/tmp/$E-kit/$(sha256sum < "$M" | cut -c1-12); SITE=/tmp/$E-site
mkdir -p "$D"
for f in "$K"/c*/"$E"-kit.tar.xz.part*; do
  [ -f "$f" ] && [ ! -f "$D/${f##*/}" ] || continue
  want=$(awk -v k="PART${f##*.part}" '$1==k{print $2}' "$M")
  if ! grep -q '^PART' "$M" || [ "$(sha256sum < "$f" | cut -c1-64)" = "$want" ]; then cp "$f" "$D/"
  else echo "left out ${f#"$K"/}: a part of another cut"; fi
done
if [ -f "$SITE/.kit-ready" ]; then echo "KIT READY (already installed)"; exit 0; fi
have=$(ls "$D"/"$E"-kit.tar.xz.part* 2>/dev/null | wc -l)
if [ "$have" -lt "$N" ]; then echo "KIT PARTIAL: $have of $N parts"; exit 3; fi
cat $(ls "$D"/"$E"-kit.tar.xz.part* | sort -V) > "$D/kit.tar.xz"
echo "$SUM  $D/kit.tar.xz" | sha256sum -c --quiet || { echo "KIT CORRUPT"; exit 4; }
mkdir -p "$D/x" "$SITE"
xz -dc -T0 "$D/kit.tar.xz" | tar -x -C "$D/x" || { echo "UNPACK FAILED"; exit 5; }
cp -a "$D/x/site/." "$SITE/" && cp "$D/x/PINS.txt" "$SITE/.kit-pins.txt" && rm -rf "$D/x" "$D/kit.tar.xz"
touch "$SITE/.kit-ready"; echo "KIT READY: $SITE ($(wc -l < "$SITE/.kit-pins.txt") pinned packages)"
