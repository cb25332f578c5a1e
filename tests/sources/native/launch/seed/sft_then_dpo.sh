#!/bin/bash
# Two stages one after another (written for the tests, after the shape of scripts that run SFT
# then a second stage on its output): the first is the seed's train.py with batch 1 (fine), the
# second passes a flag train.py does not declare.
MODEL=tiny-llama
python train.py --model_name_or_path $MODEL --output_dir sft --model_max_length 128 \
    --per_device_train_batch_size 1

python train.py --model_name_or_path $MODEL --output_dir stage2 --model_max_length 128 \
    --per_device_train_batch_size 1 --beta 0.1
