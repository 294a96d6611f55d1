#!/bin/bash
# Linux native multipath against a three-node cluster: cluster-kernel.sh
# with SCENARIO=multipath (see there). `nvme connect-all` through a node
# that does not own the rep:3 volume connects a path through every node
# (one device; the owner's path optimized, the others non-optimized, which
# forward to it); fio writes and verifies through the device while the
# owner is killed -9, and again once it is back as a path, with a QD 1
# probe reporting the longest pause of each. Run by
# `tests/vm/run.sh cluster-multipath.sh`, which adds cluster-kernel.sh.
SCENARIO=multipath exec bash /vm/cluster-kernel.sh
