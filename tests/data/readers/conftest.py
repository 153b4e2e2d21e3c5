"""Fixture writers: small files in each official format (field names and layout of the public repos), written
into tmp_path. Images are empty placeholder files: readers only check existence (`open_image` tests write a PNG)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


class OfficialFiles:
    def __init__(self, root: Path):
        self.root = root

    # --- SCAN precomp: {split}_ims.npy [n, 36, 2048]-like, {split}_caps.txt one caption per line ---
    def precomp(self, split="testall", n_images=10, per_image=5, regions=3, dim=4, dtype=np.float32, ids=None):
        d = self.root / "coco_precomp"
        d.mkdir(exist_ok=True)
        feats = np.arange(n_images * regions * dim, dtype=np.float64).reshape(n_images, regions, dim).astype(dtype)
        np.save(d / f"{split}_ims.npy", feats)
        caps = [f"image {i} caption {j}" for i in range(n_images) for j in range(per_image)]
        (d / f"{split}_caps.txt").write_text("\n".join(caps) + "\n", encoding="utf-8")
        if ids is not None:
            (d / f"{split}_ids.txt").write_text("\n".join(map(str, ids)) + "\n", encoding="utf-8")
        return d, feats, caps

    # --- Karpathy dataset_coco.json / dataset_flickr30k.json ---
    def karpathy_coco(self, splits=("test", "test", "val", "train", "restval"), sentences=5, extra_first=1):
        images = []
        for k, split in enumerate(splits):
            n = sentences + (extra_first if k == 0 else 0)
            folder = "val2014" if split != "train" else "train2014"
            name = f"COCO_{folder}_{100 + k:012d}.jpg"
            touch(self.root / "coco" / folder / name)
            images.append({"filepath": folder, "sentids": list(range(10 * k, 10 * k + n)), "filename": name,
                           "imgid": k, "split": split, "cocoid": 100 + k,
                           "sentences": [{"tokens": ["a", "b"], "raw": f"Image {k} sentence {j}. ", "imgid": k,
                                          "sentid": 10 * k + j} for j in range(n)]})
        p = self.root / "dataset_coco.json"
        p.write_text(json.dumps({"images": images, "dataset": "coco"}), encoding="utf-8")
        return p, self.root / "coco"

    def karpathy_flickr(self):
        images = []
        for k in range(3):
            name = f"{1000 + k}.jpg"
            touch(self.root / "flickr30k-images" / name)
            images.append({"sentids": [], "imgid": k, "split": "test", "filename": name,
                           "sentences": [{"tokens": [], "raw": f"flickr {k} {j}", "imgid": k, "sentid": j}
                                         for j in range(5)]})
        p = self.root / "dataset_flickr30k.json"
        p.write_text(json.dumps({"images": images, "dataset": "flickr30k"}), encoding="utf-8")
        return p, self.root / "flickr30k-images"

    # --- NegCLIP TSV as written by pandas to_csv(sep='\t') (leading unnamed index column) ---
    def negclip(self, rows=None):
        rows = rows or [
            ("A child holding a flowered umbrella.", "coco/val2014/COCO_val2014_000000184613.jpg",
             "['A umbrella holding a flowered child .', 'A flowered child holding a umbrella .']", "[2973, 1515]"),
            ("A white truck filled with motorcycle on it's flatbed.", "coco/val2014/COCO_val2014_000000551952.jpg",
             '"[""A white motorcycle filled with truck on it \'s flatbed .""]"', "[999, 4558, 996]"),
            ("A lone elephant.", "coco/val2014/COCO_val2014_000000458153.jpg", "[]", "[1]"),
        ]
        lines = ["\ttitle\tfilepath\tneg_caption\tneg_image"]
        for k, (title, fp, neg, negimg) in enumerate(rows):
            lines.append(f"{k}\t{title}\t{fp}\t{neg}\t{negimg}")
            touch(self.root / "images" / fp)
        p = self.root / "valid_neg_clip.tsv"
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return p, self.root / "images"

    # --- ARO VG-Relation / VG-Attribution ---
    def vg_relation(self, items=None):
        items = items if items is not None else [
            {"image_id": 1, "image_path": "1.jpg", "bbox_x": 1, "bbox_y": 2, "bbox_w": 5, "bbox_h": 4,
             "true_caption": "the horse is eating the grass", "false_caption": "the grass is eating the horse",
             "relation_name": "eating"},
            {"image_id": 2, "image_path": "2.jpg", "bbox_x": 0, "bbox_y": 0, "bbox_w": 3.5, "bbox_h": 3,
             "true_caption": "the cup is next to the plate", "false_caption": "the plate is next to the cup",
             "relation_name": "next to"},
        ]
        for it in items:
            touch(self.root / "images" / it["image_path"])
        p = self.root / "visual_genome_relation.json"
        p.write_text(json.dumps(items), encoding="utf-8")
        return p, self.root / "images"

    def vg_attribution(self):
        items = [{"image_id": 3, "image_path": "3.jpg", "bbox_x": 1, "bbox_y": 1, "bbox_w": 2, "bbox_h": 2,
                  "true_caption": "the white plate and the brown table",
                  "false_caption": "the brown plate and the white table", "attributes": ["white", "brown"],
                  "obj1_name": "plate", "obj2_name": "table"}] * 2
        touch(self.root / "images" / "3.jpg")
        p = self.root / "visual_genome_attribution.json"
        p.write_text(json.dumps(items), encoding="utf-8")
        return p, self.root / "images"

    # --- BLIP coco_karpathy_test.json used by COCO-Order ---
    def coco_karpathy_test(self):
        anns = [{"image": "val2014/COCO_val2014_000000391895.jpg",
                 "caption": ["A man with a red helmet on a small moped on a dirt road. ",
                             "Man riding a motor bike on a dirt road on the countryside."]},
                {"image": "val2014/COCO_val2014_000000522418.jpg",
                 "caption": ["A woman wearing a net on her head cutting a cake. "]}]
        for a in anns:
            touch(self.root / "coco" / a["image"])
        p = self.root / "coco_karpathy_test.json"
        p.write_text(json.dumps(anns), encoding="utf-8")
        return p, self.root / "coco"

    # --- SugarCrepe data/{subset}.json ---
    def sugarcrepe(self, subsets=("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att",
                                  "swap_obj")):
        d = self.root / "sugarcrepe"
        d.mkdir(exist_ok=True)
        for s in subsets:
            entries = {str(k): {"filename": f"{k:012d}.jpg", "caption": f"{s} positive {k}",
                                "negative_caption": f"{s} negative {k}"} for k in range(2)}
            (d / f"{s}.json").write_text(json.dumps(entries), encoding="utf-8")
        for k in range(2):
            touch(self.root / "val2017" / f"{k:012d}.jpg")
        return d, self.root / "val2017"

    # --- What's Up ---
    def whatsup(self):
        root = self.root / "whatsup"
        files = {}
        data = {"coco_qa_one_obj": [[139, "A dog on the left", "A dog on the right"]],
                "coco_qa_two_obj": [[632, "A cup above a plate", "A cup below a plate"],
                                    [139, "A dog left of a cat", "A dog right of a cat"]],
                "vg_qa_one_obj": [[2370, "A bird on the left", "A bird on the right"]],
                "vg_qa_two_obj": [[2371, "A man in front of a car", "A man behind a car"]]}
        for name, entries in data.items():
            p = root / f"{name}.json"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps(entries), encoding="utf-8")
            files[name] = p
        for i in (139, 632):
            touch(root / "val2017" / f"{i:012d}.jpg")
        for i in (2370, 2371):
            touch(root / "vg_images" / f"{i}.jpg")
        return files, root

    # --- What's Up Controlled-A / B: [{"image_path": "data/controlled_*/{obj1}_{prep}_{obj2}.jpeg",
    #     "caption_options": [correct, 3 wrong]}], paths relative to the official checkout (data/ = the root) ---
    def whatsup_controlled(self, subset="A"):
        root = self.root / "whatsup"
        name, folder, preps = (("controlled_images_dataset", "controlled_images", ("left of", "right of", "on",
                                                                                   "under"))
                               if subset == "A" else
                               ("controlled_clevr_dataset", "controlled_clevr", ("left of", "right of",
                                                                                 "in front of", "behind")))
        items = []
        for obj1, obj2 in (("beer-bottle", "armchair"), ("mug", "table")):
            for k, prep in enumerate(preps):
                stem = f"{obj1}_{prep.replace(' of', '_of').replace('in front', 'in-front')}_{obj2}"
                touch(root / folder / f"{stem}.jpeg")
                wrong = [p for p in preps if p != prep]
                items.append({"image_path": f"data/{folder}/{stem}.jpeg",
                              "caption_options": [f"A {obj1} {p} a {obj2}" for p in (prep, *wrong)]})
        p = root / f"{name}.json"
        p.write_text(json.dumps(items, indent=1), encoding="utf-8")
        return p, root

    # --- ABC-6K.txt + COCO 2014 captions ---
    def abc6k(self, lines=None):
        lines = lines if lines is not None else [
            "A black cat is inside a white toilet.", "A white cat is inside a black toilet .",       # unique match
            "Spacious white kitchen with brown cabinetry, sink and appliances.",                   # ambiguous
            "Spacious brown kitchen with white cabinetry , sink and appliances .",
            "A bathroom is white with a blue, black, and white floor.",                            # identical
            "A bathroom is white with a blue , black , and white floor .",
            "A red truck has a black dog in the drivers chair.",                                   # no match
            "A black truck has a red dog in the drivers chair .",
        ]
        p = self.root / "ABC-6K.txt"
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        train = {"images": [{"id": 9, "file_name": "COCO_train2014_000000000009.jpg"},
                            {"id": 30, "file_name": "COCO_train2014_000000000030.jpg"}],
                 "annotations": [{"image_id": 9, "id": 1, "caption": "a black cat is inside a white toilet"},
                                 {"image_id": 30, "id": 2,
                                  "caption": "Spacious white kitchen with brown cabinetry, sink and appliances"}]}
        val = {"images": [{"id": 12, "file_name": "COCO_val2014_000000000012.jpg"}],
               "annotations": [{"image_id": 12, "id": 3,
                                "caption": "Spacious white kitchen with brown cabinetry , sink and appliances."},
                               {"image_id": 12, "id": 4,
                                "caption": "A bathroom is white with a blue, black, and white floor."}]}
        ann = self.root / "annotations"
        ann.mkdir(exist_ok=True)
        (ann / "captions_train2014.json").write_text(json.dumps(train), encoding="utf-8")
        (ann / "captions_val2014.json").write_text(json.dumps(val), encoding="utf-8")
        for folder, i in (("train2014", 9), ("train2014", 30), ("val2014", 12)):
            touch(self.root / "coco" / folder / f"COCO_{folder}_{i:012d}.jpg")
        return p, self.root / "coco", [ann / "captions_train2014.json", ann / "captions_val2014.json"]

    # --- LABCLIP CLEVR output_2obj.csv (filename, object, attribute, object, attribute; no header) ---
    def clevr(self, rows=None):
        rows = rows if rows is not None else [
            "CLEVR_0.png,cube,red,sphere,blue", "CLEVR_1.png,cylinder,gray,cube,gray",
            "CLEVR_2.png,sphere,green,sphere,yellow", "CLEVR_3.png,cylinder,purple,cube,cyan"]
        d = self.root / "clevr"
        d.mkdir(exist_ok=True)
        for r in rows:
            touch(d / "images_2obj" / r.split(",")[0])
        p = d / "output_2obj.csv"
        p.write_text("\n".join(rows) + "\n", encoding="utf-8")
        return p, d / "images_2obj"

    # --- PUG_SPARE.csv (pandas header) ---
    def pug(self, extra_row=None):
        d = self.root / "pug"
        header = "filename,world_name,character_name,character2_name,character_texture,character2_texture,camera_yaw"
        rows = ["img_0.png,Desert,Elephant,Bear,Red,Blue,0", "img_1.png,Island,Goldfish,Bunny,Grass,Stone,90"]
        if extra_row:
            rows.append(extra_row)
        for r in rows:
            f, world = r.split(",")[:2]
            touch(d / world / f)
        p = d / "PUG_SPARE.csv"
        p.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
        return p, d

    # --- Winoground examples.jsonl + images/ex_{i}_img_{k}.png ---
    def winoground(self, n=2):
        lines = []
        for i in range(n):
            lines.append(json.dumps({"id": i, "image_0": f"ex_{i}_img_0", "image_1": f"ex_{i}_img_1",
                                     "caption_0": f"an old person kisses a young person {i}",
                                     "caption_1": f"a young person kisses an old person {i}", "tag": "Noun",
                                     "secondary_tag": "", "num_main_preds": 1,
                                     "collapsed_tag": "Object" if i % 2 else "Relation"}))
            for k in (0, 1):
                touch(self.root / "images" / f"ex_{i}_img_{k}.png")
        p = self.root / "examples.jsonl"
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return p, self.root / "images"


@pytest.fixture
def official(tmp_path) -> OfficialFiles:
    return OfficialFiles(tmp_path)
