#!/usr/bin/env bash
# Regenerate the README's comparison with the COPUS paper (between the paper-table markers)
# from `copus plan` on every shipped session: bash scripts/paper_table.sh
# tests/plan_paper_table.rs checks that the README's numbers equal `copus plan --json`.
set -euo pipefail
cd "$(dirname "$0")/.."
table=$(mktemp)
trap 'rm -f "$table" "$table.readme"' EXIT
cargo run --quiet --example paper_table >"$table"
begin='<!-- paper-table:begin'
end='<!-- paper-table:end -->'
grep -q "^$begin" README.md || { echo "README.md has no '$begin' marker" >&2; exit 1; }
awk -v begin="$begin" -v end="$end" -v table="$table" '
  index($0, begin) == 1 { print; while ((getline line < table) > 0) print line; skip = 1; next }
  $0 == end { skip = 0 }
  !skip { print }
' README.md >"$table.readme"
mv "$table.readme" README.md
echo "README.md: paper table regenerated ($(grep -c '^| `' "$table") rows)"
