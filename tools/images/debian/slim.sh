#!/bin/sh
# mmdebstrap customize hook ($1: the root filesystem). dpkg-slim.cfg keeps documentation and
# translations out of every package dpkg installs, but mmdebstrap unpacks the Essential packages
# before that configuration applies; this removes what they left, as debuerreotype's slimify
# does for the official debian:bookworm-slim.
set -eu
root=$1
find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
for folder in groff info linda lintian/overrides locale man; do
  if [ -d "$root/usr/share/$folder" ]; then
    find "$root/usr/share/$folder" -mindepth 1 -delete
  fi
done
