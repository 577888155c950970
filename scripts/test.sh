#!/usr/bin/env bash
# Builds zeroc and runs the whole test suite: lit (IR and command-line tests)
# and ctest (GoogleTest units). Ends with each runner's summary and a total.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"

"$root/scripts/build.sh" || exit 1

echo "== lit"
python3 /usr/lib/llvm-19/build/utils/lit/lit.py -sv \
  --xunit-xml-output "$build/lit-results.xml" "$build/test"
lit_rc=$?

echo "== ctest"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" \
  --output-junit "$build/ctest-results.xml"
ctest_rc=$?

python3 - "$build/lit-results.xml" "$build/ctest-results.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
passed = failed = skipped = 0
for path in sys.argv[1:]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        failed += 1
        continue
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
print(f"total: {passed} passed, {failed} failed, {skipped} skipped")
PY

[ $lit_rc -eq 0 ] && [ $ctest_rc -eq 0 ]
