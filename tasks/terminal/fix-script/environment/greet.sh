#!/bin/bash
if [ 1 -eq 1 ]
  echo ok
fi
