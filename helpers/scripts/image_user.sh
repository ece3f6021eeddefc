#!/bin/sh
# The Docker image's user, jovyan (the name and home every JupyterHub image uses), with the
# ids of the host user who builds it (build arguments UID and GID; by default 1000 and 100, a
# hub's), so that the container can write a mounted host folder and the files there stay the
# host user's. Run by the Dockerfile, as root, after the course's environment is installed.
#
#   sh image_user.sh UID GID
#
# - a GID the base image already has (100 is users, 20 macOS's staff and Debian's dialout,
#   0 root) is reused under its own name: the files simply get that group;
# - a UID the base image already has (a system account) gets the name jovyan beside it;
# - UID 0 (building as root: CI runners, a root shell on a server): the container runs as root,
#   as its host user does, and Lab is told that this is intended.
# The user's home is /home/jovyan (a hub mounts each student's volume there) and its work
# folder /home/jovyan/work, whatever the ids.
set -eu

usage="give numbers: docker build --build-arg UID=\"\$(id -u)\" --build-arg GID=\"\$(id -g)\" ..."
[ "$#" -eq 2 ] || { echo "image_user.sh: UID and GID are needed; $usage" >&2; exit 2; }
uid=$1
gid=$2
for id in "$uid" "$gid"; do
    case "$id" in
        '' | *[!0-9]*)
            echo "UID=$uid GID=$gid: user and group ids are numbers; $usage" >&2
            exit 2 ;;
    esac
done

group=$(getent group "$gid" | cut -d: -f1)
if [ -z "$group" ]; then
    groupadd --gid "$gid" jovyan
    group=jovyan
else
    echo "GID $gid is the base image's group '$group': the student's files get that group."
fi

if [ "$uid" -eq 0 ]; then
    # Lab refuses to start as root unless told; the student is root here, so say so once.
    mkdir -p /etc/jupyter
    printf '{"ServerApp": {"allow_root": true}}\n' > /etc/jupyter/jupyter_server_config.json
    install -d -o 0 -g "$gid" /home/jovyan
    echo "UID 0: the container runs as root, as you build it, so the files it writes in a" \
         "mounted folder stay root's. For an ordinary user give its ids:" \
         "--build-arg UID=1000 --build-arg GID=100 (and make the host folder theirs)."
else
    existing=$(getent passwd "$uid" | cut -d: -f1)
    if [ -n "$existing" ]; then
        echo "UID $uid is the base image's user '$existing': the student shares its id."
    fi
    # The instructor image sets its course up under the home before the user exists (so that
    # other ids rebuild none of it): the home is then given the files and owner a new one gets.
    if [ -d /home/jovyan ]; then home=--no-create-home; else home=--create-home; fi
    # -K: no warning for the ids below 1000 that macOS gives (501, ...)
    useradd -K UID_MIN=1 -K UID_MAX=2147483647 --non-unique "$home" \
        --home-dir /home/jovyan --uid "$uid" --gid "$gid" --shell /bin/bash jovyan
    if [ "$home" = --no-create-home ]; then
        cp -rn /etc/skel/. /home/jovyan/
        (cd /etc/skel && find . -mindepth 1 -exec chown "$uid:$gid" "/home/jovyan/{}" \;)
        chown "$uid:$gid" /home/jovyan
    fi
fi
install -d -o "$uid" -g "$gid" /home/jovyan/work
echo "The image's user: uid $uid, gid $gid ($group), home /home/jovyan."
