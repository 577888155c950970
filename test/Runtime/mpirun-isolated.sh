#!/bin/sh
# mpirun for the test suite: each launch gets its own OpenMPI session
# directory. OpenMPI 4.1 creates /tmp/ompi.HOST.UID with a mkdir that fails
# with "File exists" when two mpiruns race to create it (ctest -j runs several
# at once), which failed an unrelated test in CI. A fresh, short base per
# launch (Unix socket paths must stay under 108 bytes) removes the race.
#
#   mpirun-isolated.sh MPIEXEC ARGS...
set -u
mpiexec=$1
shift
base=$(mktemp -d "${TMPDIR:-/tmp}/zc-mpi.XXXXXX") || exit 1
trap 'rm -rf "$base"' EXIT
# OpenMPI 4 (orte) and 5 (prte) name the setting differently.
OMPI_MCA_orte_tmpdir_base=$base PRTE_MCA_prte_tmpdir_base=$base \
  "$mpiexec" "$@" &
child=$!
# A timeout's TERM (or an INT) reaches mpiexec, which stops its ranks; then
# its status is ours.
trap 'kill -TERM "$child" 2>/dev/null' TERM
trap 'kill -INT "$child" 2>/dev/null' INT
wait "$child"
status=$?
while kill -0 "$child" 2>/dev/null; do
  wait "$child"
  status=$?
done
exit "$status"
