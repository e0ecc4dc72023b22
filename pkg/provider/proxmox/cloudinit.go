package proxmox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	pmx "github.com/luthermonson/go-proxmox"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/pkg/provider/cidata"
)

// cloudInitPrefix starts the name of every cloud-init ISO the provider
// uploads; only such volumes are ever deleted.
const cloudInitPrefix = "claimscale-"

// cloudInitVolume is the ISO's file name: one per VM, so that a VM's drive
// never shows another claim's user data.
func (p *Provider) cloudInitVolume(vmid int, claim string) string {
	return fmt.Sprintf("%s%s-%d-%s.iso", cloudInitPrefix, p.cluster, vmid, claim)
}

// attachUserData delivers a claim's rendered user data as a NoCloud
// cloud-init drive: an ISO9660 image with the volume label cidata holding
// user-data and meta-data, uploaded to the ISO storage and attached as a
// CD-ROM. Without user data the VM keeps the cicustom snippet of the
// settings. A VM whose drive is attached already (an adopted VM) is left
// as it is.
func (p *Provider) attachUserData(ctx context.Context, node string, vmid int, m markers, cfg *vmConfig, userData []byte) error {
	if len(userData) == 0 {
		return nil
	}
	name := p.cloudInitVolume(vmid, m.claim)
	volume := p.settings.cloudInitStorage + ":iso/" + name
	if cfg != nil && strings.HasPrefix(cfg.options[p.settings.cloudInitDrive], volume+",") {
		return nil
	}
	image, err := cidata.NoCloud(userData, cidata.MetaData(ProviderID(p.cluster, vmid), m.claim))
	if err != nil {
		// The error names no user data: it comes from building the image.
		return fmt.Errorf("building the cloud-init drive of VM %d: %w", vmid, err)
	}
	if err := p.upload(ctx, node, name, image); err != nil {
		return p.api.classify(err, "uploading the cloud-init drive of VM %d to storage %s on %s (it needs content type iso, and the %s Datastore.AllocateTemplate on it)", vmid, p.settings.cloudInitStorage, node, p.api.principal)
	}
	var task *pmx.Task
	err = p.api.do(ctx, func(ctx context.Context) (err error) {
		task, err = p.vm(node, vmid).Config(ctx, pmx.VirtualMachineOption{Name: p.settings.cloudInitDrive, Value: volume + ",media=cdrom"})
		return err
	})
	if err == nil {
		err = p.tasks.wait(ctx, task)
	}
	if err != nil {
		return p.api.classify(err, "attaching the cloud-init drive %s to VM %d on %s", volume, vmid, node)
	}
	return nil
}

// removeUserData deletes the cloud-init ISO a destroyed VM had attached;
// Proxmox leaves an ISO volume in place when a VM that used it goes.
func (p *Provider) removeUserData(ctx context.Context, node string, cfg *vmConfig) error {
	volume, _, _ := strings.Cut(cfg.options[p.settings.cloudInitDrive], ",")
	return p.deleteISO(ctx, node, volume)
}

// deleteISO deletes one of our cloud-init ISOs (storage:iso/claimscale-…);
// any other volume is left alone.
func (p *Provider) deleteISO(ctx context.Context, node, volume string) error {
	storage, rest, ok := strings.Cut(volume, ":")
	if !ok || !strings.HasPrefix(rest, "iso/"+cloudInitPrefix) {
		return nil
	}
	var task *pmx.Task
	path := fmt.Sprintf("/nodes/%s/storage/%s/content/%s", node, storage, url.PathEscape(volume))
	err := p.api.do(ctx, func(ctx context.Context) error {
		var upid pmx.UPID
		if err := p.api.pve.Delete(ctx, path, &upid); err != nil {
			return err
		}
		if upid != "" {
			task = pmx.NewTask(upid, p.api.pve)
		}
		return nil
	})
	if err == nil {
		err = p.tasks.wait(ctx, task)
	}
	if err != nil && !notExists(err) {
		return p.api.classify(err, "deleting the cloud-init drive %s", volume)
	}
	return nil
}

// isoSweepInterval is how often List looks for cloud-init ISOs no VM uses.
const isoSweepInterval = 10 * time.Minute

// sweepISOs deletes this cluster's cloud-init ISOs that no VM can use: one
// named for a VM ID no VM has (the VM was destroyed outside claimscale, or
// its Create failed after the upload and the VM went), or one another
// claim's VM now holds. An ISO of a VM being made, or of a VM of the same
// claim (which attaches it, or deletes it with the VM), stays. It runs from
// List, at most every isoSweepInterval, and only with cloudInitStorage set.
func (p *Provider) sweepISOs(ctx context.Context, vms []vmResource) {
	if p.settings.cloudInitStorage == "" {
		return
	}
	p.mu.Lock()
	if !p.lastSweep.IsZero() && p.clock.Since(p.lastSweep) < isoSweepInterval {
		p.mu.Unlock()
		return
	}
	p.lastSweep = p.clock.Now()
	busy := map[int]bool{}
	for vmid := range p.inflight {
		busy[vmid] = true
	}
	p.mu.Unlock()
	log := logf.FromContext(ctx)

	byID := map[int]vmResource{}
	for _, vm := range vms {
		byID[vm.VMID] = vm
	}
	var nodes pmx.NodeStatuses
	if err := p.api.do(ctx, func(ctx context.Context) (err error) { nodes, err = p.api.pve.Nodes(ctx); return err }); err != nil {
		log.Info("cloud-init ISO sweep skipped: listing Proxmox nodes failed", "error", err.Error())
		return
	}
	prefix := cloudInitPrefix + p.cluster + "-"
	seen := map[string]bool{}
	for _, n := range nodes {
		if n == nil || n.Status != "online" {
			continue
		}
		var volumes []struct {
			VolID string `json:"volid"`
		}
		path := fmt.Sprintf("/nodes/%s/storage/%s/content?content=iso", url.PathEscape(n.Node), url.PathEscape(p.settings.cloudInitStorage))
		if err := p.api.get(ctx, path, &volumes); err != nil {
			log.Info("cloud-init ISO sweep skipped a node: listing its ISO storage failed", "proxmoxNode", n.Node, "error", err.Error())
			continue
		}
		for _, v := range volumes {
			name, ok := strings.CutPrefix(v.VolID, p.settings.cloudInitStorage+":iso/"+prefix)
			if !ok || seen[v.VolID] {
				continue
			}
			seen[v.VolID] = true // a shared storage shows it on every node
			id, claim, ok := strings.Cut(strings.TrimSuffix(name, ".iso"), "-")
			vmid, err := strconv.Atoi(id)
			if !ok || err != nil || busy[vmid] {
				continue
			}
			if vm, exists := byID[vmid]; exists {
				if m := markersFromTags(vm.Tags); m.claim == "" || m.claim == claim {
					continue
				}
			}
			if err := p.deleteISO(ctx, n.Node, v.VolID); err != nil {
				log.Info("deleting a cloud-init ISO no VM uses failed", "volume", v.VolID, "error", err.Error())
				continue
			}
			log.Info("deleted a cloud-init ISO no VM uses", "volume", v.VolID, "vmid", vmid)
		}
	}
}

// upload posts a file to the ISO storage (POST
// /nodes/{node}/storage/{storage}/upload, content iso, multipart) and waits
// for the copy task. go-proxmox's Upload wants a file on disk and takes no
// context, so the request is made here, through the same HTTP client.
func (p *Provider) upload(ctx context.Context, node, name string, data []byte) error {
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	_ = w.WriteField("content", "iso")
	part, err := w.CreateFormFile("filename", name)
	if err != nil {
		return err
	}
	if _, err := part.Write(data); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	endpoint := fmt.Sprintf("%s/nodes/%s/storage/%s/upload", p.api.endpoint, url.PathEscape(node), url.PathEscape(p.settings.cloudInitStorage))
	var upid pmx.UPID
	err = p.api.do(ctx, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body.Bytes()))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", w.FormDataContentType())
		req.Header.Set("Accept", "application/json")
		if p.api.token != "" {
			req.Header.Set("Authorization", "PVEAPIToken="+p.api.token)
		}
		resp, err := p.api.http.Do(req)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if err != nil {
			return err
		}
		if resp.StatusCode >= http.StatusBadRequest {
			return errors.New(resp.Status) // the failure record holds the message
		}
		var answer struct {
			Data pmx.UPID `json:"data"`
		}
		if err := json.Unmarshal(raw, &answer); err != nil {
			return fmt.Errorf("decoding the upload's answer: %w", err)
		}
		upid = answer.Data
		return nil
	})
	if err != nil {
		return err
	}
	if upid == "" {
		return nil
	}
	return p.tasks.wait(ctx, pmx.NewTask(upid, p.api.pve))
}
