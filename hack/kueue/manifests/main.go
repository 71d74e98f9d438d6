// Command manifests turns Kueue's own manifests (the CRDs and webhook configurations
// of the pinned module, config/components/) into the JSON hack/kueue/up.sh applies
// (one file per object, and objects.tsv: "API path<TAB>file" in apply order)
// for a manager run as a host process: every webhook and conversion webhook is
// called by URL (@KUEUE_URL@ + its path) with @KUEUE_CA_BUNDLE@ as the CA, which
// up.sh fills in. Only the webhooks of Kueue's own API group and of batch/job (the one
// built-in framework up.sh enables: Kueue refuses an empty list) are kept: the other
// frameworks' webhooks (pods, Deployments, ...) would put Kueue in the path of every
// pod created on the cluster, for frameworks that are not enabled.
//
//	manifests SRC_DIR OUT_DIR   (SRC_DIR: the module's config/components)
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

const (
	urlPlaceholder = "@KUEUE_URL@"
	caPlaceholder  = "@KUEUE_CA_BUNDLE@"
)

// API groups whose webhooks are kept.
var keptGroups = map[any]bool{"kueue.x-k8s.io": true, "batch": true}

// CRDs upstream's config/components/crd/kustomization.yaml gives a conversion webhook.
var converted = map[string]bool{
	"localqueues": true, "clusterqueues": true, "cohorts": true, "workloads": true, "multikueueclusters": true,
}

type object = map[string]any

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: manifests SRC_DIR OUT_DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "manifests:", err)
		os.Exit(1)
	}
}

func run(src, out string) error {
	crds, err := readCRDs(filepath.Join(src, "crd", "bases"))
	if err != nil {
		return err
	}
	hooks, err := readWebhooks(filepath.Join(src, "webhook", "manifests.yaml"))
	if err != nil {
		return err
	}
	var index strings.Builder
	for _, obj := range append(crds, hooks...) {
		meta, _ := obj["metadata"].(object)
		name, _ := meta["name"].(string)
		resource, ok := resources[fmt.Sprint(obj["kind"])]
		if !ok || name == "" {
			return fmt.Errorf("unexpected object %v %q", obj["kind"], name)
		}
		file := strings.ToLower(fmt.Sprint(obj["kind"])) + "_" + name + ".json"
		data, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, file), data, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(&index, "%s/%s\t%s\n", resource, name, file)
	}
	return os.WriteFile(filepath.Join(out, "objects.tsv"), []byte(index.String()), 0o644)
}

// API paths (collection) of the kinds written.
var resources = map[string]string{
	"CustomResourceDefinition":       "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
	"MutatingWebhookConfiguration":   "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
	"ValidatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
}

func readCRDs(dir string) ([]object, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no CRDs in %s (%v)", dir, err)
	}
	sort.Strings(files)
	var crds []object
	for _, file := range files {
		docs, err := readDocs(file)
		if err != nil {
			return nil, err
		}
		for _, crd := range docs {
			spec, _ := crd["spec"].(object)
			names, _ := spec["names"].(object)
			if plural, _ := names["plural"].(string); converted[plural] {
				spec["conversion"] = object{
					"strategy": "Webhook",
					"webhook": object{
						"clientConfig":             object{"url": urlPlaceholder + "/convert", "caBundle": caPlaceholder},
						"conversionReviewVersions": []any{"v1"},
					},
				}
			}
			crds = append(crds, crd)
		}
	}
	return crds, nil
}

func readWebhooks(file string) ([]object, error) {
	docs, err := readDocs(file)
	if err != nil {
		return nil, err
	}
	var configs []object
	for _, doc := range docs {
		var kept []any
		hooks, _ := doc["webhooks"].([]any)
		for _, h := range hooks {
			hook, _ := h.(object)
			if !onlyKeptGroups(hook) {
				continue
			}
			cc, _ := hook["clientConfig"].(object)
			svc, _ := cc["service"].(object)
			path, _ := svc["path"].(string)
			if path == "" {
				return nil, fmt.Errorf("webhook %v has no service path", hook["name"])
			}
			hook["clientConfig"] = object{"url": urlPlaceholder + path, "caBundle": caPlaceholder}
			kept = append(kept, hook)
		}
		if len(kept) == 0 {
			continue
		}
		doc["webhooks"] = kept
		meta, _ := doc["metadata"].(object)
		meta["name"] = "kueue-" + fmt.Sprint(meta["name"]) // as upstream's kustomize namePrefix
		configs = append(configs, doc)
	}
	if len(configs) != 2 {
		return nil, fmt.Errorf("expected a mutating and a validating configuration in %s, got %d", file, len(configs))
	}
	return configs, nil
}

func onlyKeptGroups(hook object) bool {
	rules, _ := hook["rules"].([]any)
	if len(rules) == 0 {
		return false
	}
	for _, r := range rules {
		rule, _ := r.(object)
		groups, _ := rule["apiGroups"].([]any)
		for _, g := range groups {
			if !keptGroups[g] {
				return false
			}
		}
	}
	return true
}

func readDocs(file string) ([]object, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var docs []object
	for _, part := range strings.Split("\n"+string(raw), "\n---") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		var doc object
		if err := yaml.Unmarshal([]byte(part), &doc); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
	return docs, nil
}
