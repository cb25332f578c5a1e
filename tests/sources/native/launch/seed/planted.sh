#!/bin/bash
# Planted mistakes (not published): a renamed flag, a value the script never sets, a DeepSpeed
# JSON that does not exist (given as an override by the rule catalogue).
python train.py \
    --model_name_or_path tiny-llama \
    --data_path $DATA \
    --output_dir output \
    --per_device_train_batch_size 1 \
    --evaluation_strategy steps \
    --model_max_length 128
