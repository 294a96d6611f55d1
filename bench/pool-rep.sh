#!/bin/bash
# The replicated-volume run of bench/pool.sh, as it was before erasure-coded
# volumes: three nodes (racks r1, r2, r3) serving a rep:1, a rep:2 and a
# rep:3 volume against `strata serve`. Every bench/pool.sh option applies
# (NODES and VOLUMES too, if set); the results of this run are named
# pool-rep-*.json, as the earlier ones in bench/results/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export NODES=${NODES:-3}
export VOLUMES=${VOLUMES:-serve pool-rep1 pool-rep2 pool-rep3}
export OUT=${OUT:-$here/results/pool-rep-$(date +%Y%m%d-%H%M%S).json}
exec "$here/pool.sh" "$@"
