#!/bin/sh
echo ran-$((6 * 7))
