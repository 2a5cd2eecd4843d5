#!/bin/bash
printf "41\n" > "${RSI_APP:-/app}/answer.txt"
